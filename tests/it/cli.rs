//! The `tagpin` binary, run as a user runs it, on a temporary tree of manifests against a real
//! registry (Debian's `docker-registry`) on loopback.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::registry::{free_port, IndexKind, Mode, TestRegistry};

/// Runs the real binary with a clean environment: no Docker config of the machine's user.
fn tagpin(args: &[&str], home: &Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(args)
        .env("HOME", home)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run tagpin")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        Tree {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root().join(rel)).unwrap()
    }

    fn home(&self) -> &Path {
        self.dir.path()
    }

    fn run(&self, args: &[&str]) -> Output {
        tagpin(args, self.home())
    }
}

fn deployment(name: &str, image: &str) -> String {
    format!(
        "# {name} serves the web\n\
         apiVersion: apps/v1\n\
         kind: Deployment\n\
         metadata:\n  name: {name}\n  namespace: shop\n\
         spec:\n  template:\n    spec:\n      containers:\n\
         \x20       - name: app\n          image: \"{image}\" # keep quoted\n\
         \x20         ports: [{{containerPort: 80}}]\n"
    )
}

#[tokio::test]
async fn pin_pins_every_image_and_a_second_run_changes_nothing() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    let multi = registry
        .push_index(
            "acme/multi",
            "2",
            IndexKind::Oci,
            &[("linux", "amd64"), ("linux", "arm64")],
            "m",
        )
        .await;
    let tree = Tree::new();
    tree.write(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    );
    tree.write(
        "apps/multi.yaml",
        &deployment("multi", &format!("{host}/acme/multi:2")),
    );
    tree.write("README.md", "not a manifest\n");
    tree.write(
        "apps/settings.yaml",
        "replicas: 3\nimage: not-kubernetes:1\n",
    );
    let root = tree.root();
    let root = root.to_str().unwrap();

    let first = tree.run(&["--insecure-registry", &host, "pin", root]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert_eq!(
        tree.read("apps/web.yaml"),
        deployment("web", &format!("{host}/acme/web:1.0@{}", web.manifest))
    );
    assert_eq!(
        tree.read("apps/multi.yaml"),
        deployment("multi", &format!("{host}/acme/multi:2@{}", multi.index))
    );
    assert_eq!(
        tree.read("apps/settings.yaml"),
        "replicas: 3\nimage: not-kubernetes:1\n"
    );

    let modified = std::fs::metadata(tree.root().join("apps/web.yaml"))
        .unwrap()
        .modified()
        .unwrap();
    let second = tree.run(&["--insecure-registry", &host, "pin", root]);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert!(
        stdout(&second).contains("0 to pin, 0 stale"),
        "{}",
        stdout(&second)
    );
    assert_eq!(
        std::fs::metadata(tree.root().join("apps/web.yaml"))
            .unwrap()
            .modified()
            .unwrap(),
        modified,
        "an up-to-date file is not rewritten"
    );
}

#[tokio::test]
async fn a_moved_tag_yields_exactly_a_one_line_diff() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let old = registry.push_image("acme/web", "stable", "old").await;
    registry.push_image("acme/api", "1", "api").await;
    let tree = Tree::new();
    tree.write(
        "web.yaml",
        &deployment("web", &format!("{host}/acme/web:stable")),
    );
    tree.write(
        "api.yaml",
        &deployment("api", &format!("{host}/acme/api:1")),
    );
    let root = tree.root();
    let root = root.to_str().unwrap();
    let pinned = tree.run(&["--insecure-registry", &host, "pin", root]);
    assert_eq!(pinned.status.code(), Some(0), "{}", stderr(&pinned));
    let api_before = tree.read("api.yaml");

    let new = registry.push_image("acme/web", "stable", "new").await;
    let plan = tree.run(&["--insecure-registry", &host, "plan", root]);
    assert_eq!(plan.status.code(), Some(0), "{}", stderr(&plan));
    let out = stdout(&plan);
    let removed: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
        .collect();
    let added: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .collect();
    assert_eq!(
        removed,
        vec![format!(
            "-          image: \"{host}/acme/web:stable@{}\" # keep quoted",
            old.manifest
        )]
    );
    assert_eq!(
        added,
        vec![format!(
            "+          image: \"{host}/acme/web:stable@{}\" # keep quoted",
            new.manifest
        )]
    );
    assert!(out.contains("1 stale pin(s) to update"), "{out}");
    // plan wrote nothing
    assert!(tree.read("web.yaml").contains(&old.manifest));
    assert_eq!(tree.read("api.yaml"), api_before);
}

#[tokio::test]
async fn pin_check_fails_until_everything_is_pinned_and_writes_nothing() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1", "w").await;
    let tree = Tree::new();
    let original = deployment("web", &format!("{host}/acme/web:1"));
    tree.write("web.yaml", &original);
    let root = tree.root();
    let root = root.to_str().unwrap();

    let check = tree.run(&["--insecure-registry", &host, "pin", "--check", root]);
    assert_eq!(check.status.code(), Some(1));
    assert_eq!(tree.read("web.yaml"), original);

    tree.run(&["--insecure-registry", &host, "pin", root]);
    let check = tree.run(&["--insecure-registry", &host, "pin", "--check", root]);
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
}

#[tokio::test]
async fn bad_files_and_bad_images_are_reported_while_the_rest_is_pinned() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1", "w").await;
    let dead = format!("127.0.0.1:{}", free_port());
    let tree = Tree::new();
    tree.write(
        "good.yaml",
        &deployment("web", &format!("{host}/acme/web:1")),
    );
    let broken =
        "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: [unclosed\n";
    tree.write("broken.yaml", broken);
    let invalid = deployment("bad", "Not_A/Valid::Ref");
    tree.write("invalid.yaml", &invalid);
    let missing = deployment("gone", &format!("{host}/acme/missing:1"));
    tree.write("missing.yaml", &missing);
    let unreachable = deployment("far", &format!("{dead}/acme/web:1"));
    tree.write("unreachable.yaml", &unreachable);
    let root = tree.root();
    let root = root.to_str().unwrap();

    let out = tree.run(&[
        "--insecure-registry",
        &host,
        "--insecure-registry",
        &dead,
        "pin",
        root,
    ]);

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("broken.yaml:7:1: invalid YAML"), "{err}");
    assert!(
        err.contains("invalid.yaml:12") && err.contains("invalid image reference"),
        "{err}"
    );
    assert!(
        err.contains("missing.yaml:12") && err.contains("acme/missing:1"),
        "{err}"
    );
    assert!(
        err.contains("unreachable.yaml:12") && err.contains(&dead),
        "{err}"
    );
    assert_eq!(tree.read("broken.yaml"), broken);
    assert_eq!(tree.read("invalid.yaml"), invalid);
    assert_eq!(tree.read("missing.yaml"), missing);
    assert_eq!(tree.read("unreachable.yaml"), unreachable);
    assert!(tree.read("good.yaml").contains(&web.manifest));
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_out_of_the_tree_is_not_followed() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1", "w").await;
    let tree = Tree::new();
    let outside = tree.home().join("outside.yaml");
    let outside_text = deployment("secret", &format!("{host}/acme/web:1"));
    std::fs::write(&outside, &outside_text).unwrap();
    tree.write("in.yaml", &deployment("in", &format!("{host}/acme/web:1")));
    std::os::unix::fs::symlink(&outside, tree.root().join("link.yaml")).unwrap();
    let root = tree.root();

    let out = tree.run(&[
        "--insecure-registry",
        &host,
        "-v",
        "pin",
        root.to_str().unwrap(),
    ]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), outside_text);
    assert!(tree.read("in.yaml").contains("@sha256:"));
    assert!(stderr(&out).contains("symlink"), "{}", stderr(&out));
}

#[tokio::test]
async fn resolve_prints_a_lone_digest_or_a_table_or_json() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1", "w").await;
    let api = registry.push_image("acme/api", "2", "a").await;
    let tree = Tree::new();
    let web_ref = format!("{host}/acme/web:1");
    let api_ref = format!("{host}/acme/api:2");

    let one = tree.run(&["--insecure-registry", &host, "resolve", &web_ref]);
    assert_eq!(stdout(&one), format!("{}\n", web.manifest));

    let two = tree.run(&["--insecure-registry", &host, "resolve", &web_ref, &api_ref]);
    assert_eq!(
        stdout(&two),
        format!("{web_ref}\t{}\n{api_ref}\t{}\n", web.manifest, api.manifest)
    );

    let json = tree.run(&[
        "--insecure-registry",
        &host,
        "--output",
        "json",
        "resolve",
        &web_ref,
        "bad::ref",
    ]);
    assert_eq!(json.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["images"][0]["digest"], web.manifest.as_str());
    assert_eq!(value["images"][0]["kind"], "image");
    assert!(value["images"][1]["error"]
        .as_str()
        .unwrap()
        .contains("invalid image reference"));
}

#[tokio::test]
async fn plan_json_lists_each_change_with_file_workload_and_digests() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1", "w").await;
    let tree = Tree::new();
    tree.write(
        "web.yaml",
        &deployment("web", &format!("{host}/acme/web:1")),
    );
    let root = tree.root();
    let out = tree.run(&[
        "--insecure-registry",
        &host,
        "--output",
        "json",
        "plan",
        root.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let change = &value["changes"][0];
    assert_eq!(change["workload"], "shop/Deployment/web");
    assert_eq!(change["container"], "app");
    assert_eq!(change["line"], 12);
    assert_eq!(change["new_digest"], web.manifest.as_str());
    assert_eq!(change["action"], "pin");
    assert_eq!(value["summary"]["to_pin"], 1);
}

#[test]
fn an_unreadable_ca_file_is_a_fatal_configuration_error() {
    let home = tempfile::tempdir().unwrap();
    let out = tagpin(
        &["--ca-file", "/nonexistent/ca.pem", "resolve", "nginx:1"],
        home.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("/nonexistent/ca.pem"),
        "{}",
        stderr(&out)
    );
}

/// YAML 1.2 allows a tab as the separation after `key:`; it refuses a document whose `%YAML`
/// directive names a major version it does not define (§6.8.1). tagpin does both, as the spec
/// says: the first file is pinned with its tab kept, the second refused by name and left as is.
#[tokio::test]
async fn a_tab_after_the_colon_is_pinned_and_an_unknown_yaml_major_version_is_refused() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1", "w").await;
    let tree = Tree::new();
    let tabbed = deployment("web", &format!("{host}/acme/web:1"))
        .replace("image: \"", "image:\t\"")
        .replace("name: web", "name:\tweb");
    tree.write("tabbed.yaml", &tabbed);
    let future = format!(
        "%YAML 9.9\n---\n{}",
        deployment("future", &format!("{host}/acme/web:1"))
    );
    tree.write("future.yaml", &future);
    let root = tree.root();
    let root = root.to_str().unwrap();

    let out = tree.run(&["--insecure-registry", &host, "pin", root]);

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("future.yaml:1:1: invalid YAML: %YAML 9.9"),
        "{err}"
    );
    assert_eq!(tree.read("future.yaml"), future);
    let pinned = tabbed.replace(
        &format!("{host}/acme/web:1\""),
        &format!("{host}/acme/web:1@{}\"", web.manifest),
    );
    assert_ne!(pinned, tabbed);
    assert_eq!(tree.read("tabbed.yaml"), pinned);
}
