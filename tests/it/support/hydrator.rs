//! Argo CD's Source Hydrator, as the integration tests play it.
//!
//! Two halves, each built from a fixture of `tests/fixtures/gitops/` (see its README):
//! - [`hydrate`] pushes what Argo CD's commit server pushes for one hydration: a commit on a
//!   hydrated branch (an orphan branch, never descending from the dry commits), its contents
//!   cleared and written again as `WriteForPaths` writes them (`argocd-hydrated-branch/`: a
//!   root `hydrator.metadata` and `.gitattributes`, and per hydrated path the manifests, a
//!   `hydrator.metadata` and a README), its dry commit and repository in place of the
//!   documented ones;
//! - [`application`] and the functions after it write the `Application` Argo CD's controller
//!   reports (`argocd-application-hydrator.yaml`): its `spec.sourceHydrator`, then the status
//!   of each step (hydrating, hydrated, failed, synced).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::git::{git_command, git_ok, BareRepo};

/// The dry commit and repository of the documented hydration the fixtures hold.
const DOCUMENTED_DRY: &str = "6cb951525937865dced818bbdd78c89b2d2b3045";
const DOCUMENTED_REPOSITORY: &str = "https://git.example.com/owner/manifests-repo";
/// The hydrated path of the fixture branch.
const DOCUMENTED_PATH: &str = "helm-guestbook";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gitops")
}

/// The files of the documented hydrated branch, relative to its root.
fn branch_files(dir: &Path, under: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let relative = under.join(path.file_name().unwrap());
        if path.is_dir() {
            branch_files(&path, &relative, out);
        } else {
            out.push((relative, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// One hydration, as Argo CD's commit server pushes it: `dry` (a commit of `repo_url`) hydrated
/// into `branch` of `repo`, each `(path, manifests)` of `paths` written as the documented
/// branch lays out its path, in a commit by "Argo CD" saying `[Argo CD Bot] hydrate <dry>`.
/// A missing `branch` starts from `start` (the sync branch, for a `hydrateTo` branch) or as an
/// orphan. Returns the hydrated commit.
pub fn hydrate(
    repo: &BareRepo,
    repo_url: &str,
    dry: &str,
    branch: &str,
    start: Option<&str>,
    paths: &[(&str, &str)],
) -> String {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    git_ok(dir, &["clone", "--quiet", &repo.file_url(), "."]);
    match (
        repo.head(branch),
        start.and_then(|s| repo.head(s).map(|_| s)),
    ) {
        (Some(_), _) => git_ok(
            dir,
            &[
                "checkout",
                "--quiet",
                "-B",
                branch,
                &format!("origin/{branch}"),
            ],
        ),
        (None, Some(start)) => git_ok(
            dir,
            &[
                "checkout",
                "--quiet",
                "-b",
                branch,
                &format!("origin/{start}"),
            ],
        ),
        (None, None) => git_ok(dir, &["checkout", "--quiet", "--orphan", branch]),
    };
    // `RemoveContents`: the branch holds only what this hydration writes.
    git_ok(
        dir,
        &["rm", "-r", "--quiet", "--force", "--ignore-unmatch", "."],
    );
    let mut documented = Vec::new();
    branch_files(
        &fixtures().join("argocd-hydrated-branch"),
        Path::new(""),
        &mut documented,
    );
    let fill = |text: &str| {
        text.replace(DOCUMENTED_DRY, dry)
            .replace(DOCUMENTED_REPOSITORY, repo_url)
    };
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    for (file, text) in &documented {
        match file.strip_prefix(DOCUMENTED_PATH) {
            Err(_) => files.push((file.clone(), fill(text))),
            Ok(name) => {
                for (path, _) in paths {
                    files.push((Path::new(path).join(name), fill(text)));
                }
            }
        }
    }
    for (path, manifests) in paths {
        files.push((Path::new(path).join("manifest.yaml"), manifests.to_string()));
    }
    for (file, text) in files {
        let file = dir.join(file);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
    git_ok(dir, &["add", "--all"]);
    let commit = git_command()
        .current_dir(dir)
        .args([
            "commit",
            "--quiet",
            "-m",
            &format!("[Argo CD Bot] hydrate {dry}"),
        ])
        .env("GIT_AUTHOR_NAME", "Argo CD")
        .env("GIT_AUTHOR_EMAIL", "argo-cd@example.com")
        .env("GIT_COMMITTER_NAME", "Argo CD")
        .env("GIT_COMMITTER_EMAIL", "argo-cd@example.com")
        .output()
        .unwrap();
    assert!(
        commit.status.success(),
        "hydrated commit: {}",
        String::from_utf8_lossy(&commit.stderr)
    );
    git_ok(
        dir,
        &[
            "push",
            "--quiet",
            "origin",
            &format!("HEAD:refs/heads/{branch}"),
        ],
    );
    git_ok(dir, &["rev-parse", "HEAD"])
}

/// The documented Application with a Source Hydrator, made `namespace/name`, deploying to
/// `destination`, hydrating `dry_path` of `repo_url` (at `main`) into `sync_path` of
/// `sync_branch`, without `hydrateTo` and with no status yet.
pub fn application(
    name: &str,
    destination: &str,
    repo_url: &str,
    dry_path: &str,
    sync_branch: &str,
    sync_path: &str,
) -> Value {
    let text =
        std::fs::read_to_string(fixtures().join("argocd-application-hydrator.yaml")).unwrap();
    let mut app: Value = serde_yaml::from_str(&text).unwrap();
    app["metadata"] = json!({"name": name, "namespace": "argocd"});
    app["spec"]["destination"]["namespace"] = json!(destination);
    app["spec"]["sourceHydrator"] = json!({
        "drySource": {"repoURL": repo_url, "path": dry_path, "targetRevision": "main"},
        "syncSource": {"targetBranch": sync_branch, "path": sync_path},
    });
    app.as_object_mut().unwrap().remove("status");
    app
}

/// `hydrateTo`: Argo CD commits into `branch` for a review, not into the sync branch.
pub fn hydrate_to(app: &mut Value, branch: &str) {
    app["spec"]["sourceHydrator"]["hydrateTo"] = json!({"targetBranch": branch});
}

/// The current hydrate operation, with its `sourceHydrator` copied from the spec as Argo CD
/// copies it when the operation starts.
fn operation(app: &mut Value, operation: Value) {
    let mut operation = operation;
    operation["sourceHydrator"] = app["spec"]["sourceHydrator"].clone();
    operation["startedAt"] = json!("2025-06-09T17:50:20Z");
    app["status"]["sourceHydrator"]["currentOperation"] = operation;
}

/// Argo CD hydrated `dry` as `hydrated`: its current and last successful operation.
pub fn hydrated(app: &mut Value, dry: &str, hydrated: &str) {
    operation(
        app,
        json!({"phase": "Hydrated", "message": "", "drySHA": dry, "hydratedSHA": hydrated,
               "finishedAt": "2025-06-09T17:50:24Z"}),
    );
    app["status"]["sourceHydrator"]["lastSuccessfulOperation"] = json!({
        "drySHA": dry, "hydratedSHA": hydrated,
        "sourceHydrator": app["spec"]["sourceHydrator"].clone(),
    });
}

/// Argo CD is hydrating; it has not resolved the dry revision yet.
pub fn hydrating(app: &mut Value) {
    operation(app, json!({"phase": "Hydrating", "message": ""}));
}

/// Argo CD's hydration of `dry` failed, with `message`.
pub fn failed(app: &mut Value, dry: &str, message: &str) {
    operation(
        app,
        json!({"phase": "Failed", "message": message, "drySHA": dry,
               "finishedAt": "2025-06-09T17:50:22Z"}),
    );
}

/// Argo CD synced the hydrated commit `hydrated` and reports the Deployments `(namespace,
/// name)` it manages, Synced and Healthy.
pub fn synced(app: &mut Value, hydrated: &str, deployments: &[(&str, &str)]) {
    let spec = &app["spec"]["sourceHydrator"];
    // What Argo CD compares a hydrated application with: its sync source.
    let source = json!({
        "repoURL": spec["drySource"]["repoURL"],
        "path": spec["syncSource"]["path"],
        "targetRevision": spec["syncSource"]["targetBranch"],
    });
    app["status"]["sync"] = json!({
        "status": "Synced",
        "revision": hydrated,
        "comparedTo": {"source": source, "destination": app["spec"]["destination"].clone()},
    });
    app["status"]["health"] = json!({"status": "Healthy"});
    app["status"]["resources"] = deployments
        .iter()
        .map(|(namespace, name)| {
            json!({"kind": "Deployment", "name": name, "group": "apps", "version": "v1",
                   "namespace": namespace, "status": "Synced", "health": {"status": "Healthy"}})
        })
        .collect();
}
