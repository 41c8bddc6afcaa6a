//! Manifest text for test repositories: the Deployments tests commit for tagpin to scan, pin
//! and verify.
//!
//! For tests that only need a well-formed manifest naming an image. Tests whose point is the
//! bytes of a file (comments kept, quoting, indentation: `cli.rs`, `sync.rs`, `promote.rs`)
//! write their own text, so that what they check stays in view.

/// A Deployment `name` without a namespace (the configured default applies) whose one
/// container `app` runs `image`: the least a manifest needs for tagpin to find and pin it.
pub fn deployment(name: &str, image: &str) -> String {
    with_metadata(&format!("  name: {name}\n"), image)
}

/// [`deployment`] in `namespace`, for tests that read `namespace/Deployment/name` back.
pub fn deployment_in(namespace: &str, name: &str, image: &str) -> String {
    with_metadata(
        &format!("  name: {name}\n  namespace: {namespace}\n"),
        image,
    )
}

/// A Deployment `name` as a cluster could roll it out: `replicas`, and a selector matching its
/// pod template's label `app: <name>` (what the verifier follows from workload to pods).
pub fn deployment_with_replicas(name: &str, image: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    )
}

/// A Deployment with these `metadata` lines (indented, each ending in a newline) and one
/// container `app` on `image`.
fn with_metadata(metadata: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n{metadata}spec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    )
}
