//! The `PinnedRepository` custom resource: one GitOps repository, declared as a Kubernetes
//! object, with its state in `.status` the way kstatus and `kubectl wait` read it.
//!
//! The spec is `tagpin.yaml` for one repository, key for key: its schema is derived from the
//! same raw types the file is read with (`crate::config`), and at reconcile time the spec is
//! read back through them and validated by the same code, so a resource and a file give the
//! same field-path errors. The spec is therefore kept here as the JSON the API server holds;
//! [`crate::config::Config::from_resource_spec`] is its one reader.

use std::borrow::Cow;

use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// The label Flux-style sharding selects on (`--watch-label-selector`).
pub const SHARD_LABEL: &str = "sharding.tagpin.dev/key";

/// A GitOps repository whose image tags tagpin keeps pinned to digests.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "tagpin.dev",
    version = "v1alpha1",
    kind = "PinnedRepository",
    namespaced,
    status = "PinnedRepositoryStatus",
    shortname = "pinrepo",
    category = "tagpin",
    doc = "A GitOps repository whose image tags tagpin pins to registry digests.",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Last Pin","type":"string","jsonPath":".status.lastPin.commit"}"#,
    printcolumn = r#"{"name":"Verdict","type":"string","jsonPath":".status.verdict.state"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(transparent)]
pub struct PinnedRepositorySpec {
    /// The spec as the API server holds it: `tagpin.yaml`'s keys.
    pub fields: serde_json::Map<String, serde_json::Value>,
}

/// The schema of `tagpin.yaml`'s raw types.
impl JsonSchema for PinnedRepositorySpec {
    fn schema_name() -> Cow<'static, str> {
        "PinnedRepositorySpec".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = crate::config::spec_schema(generator);
        schema.insert(
            "description".into(),
            "tagpin.yaml for one repository (same keys, snake_case); secrets only by reference \
             to Secrets of this namespace."
                .into(),
        );
        schema
    }
}

/// What the controller last saw and did, as kstatus reads it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PinnedRepositoryStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, and `Reconciling` or `Stalled` while they are true.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The last commit tagpin pushed to the target branch (commit mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pin: Option<LastPin>,
    /// The pull request carrying the pins (pull-request mode), while open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequestRef>,
    /// The last verification of what is in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictSummary>,
    /// One entry per stage promoted into (`spec.promotion.stages` after the first), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub promotions: Vec<PromotionStatus>,
    /// What `tagpin audit` finds at the branch's tip on the cluster the pins are verified on,
    /// read again when the tip moves and at most once per interval otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditStatus>,
}

/// The audit of the branch's tip: how many workloads have each finding.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditStatus {
    /// The commit audited.
    pub commit: String,
    /// Workloads with each finding, by the names `tagpin audit --output json` uses
    /// (`pinned`, `tag-only`, `not-in-git`, `missing`, `unread`, `drift`, `mixed`).
    pub workloads: std::collections::BTreeMap<String, usize>,
    /// Nothing needs attention: no drift, no mixed digests, every list and manifest read.
    pub clean: bool,
    /// When it was audited (RFC 3339).
    pub time: String,
}

/// Where the promotion into one stage stands, as the last pass found it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromotionStatus {
    /// The stage promoted into.
    pub stage: String,
    /// The stage whose converged digests are carried into it.
    pub from: String,
    /// `open`, `soaking`, `waiting`, `refused`, or `unreachable` when the pass could not
    /// verify `from` (its cluster, the Git remote or the forge could not be reached).
    pub gate: String,
    /// Why, in one sentence: `staging converged since …`, `staging is not converged yet: …`.
    pub message: String,
    /// The promotion pull request, while one is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequestRef>,
    /// The commit that promoted into the stage, when its `mode` is `commit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The last promotion merged into the stage, verified on the stage's own cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictSummary>,
    /// When this entry last changed (RFC 3339).
    pub time: String,
}

/// A condition in the shape of `metav1.Condition`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// RFC 3339; changed only when `status` changes.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastPin {
    pub commit: String,
    pub branch: String,
    /// How many images that commit moved.
    pub images: u32,
    pub time: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullRequestRef {
    pub number: u64,
    pub url: String,
    pub branch: String,
}

/// A verification's state and its counts of pinned containers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerdictSummary {
    /// `converged`, `progressing`, `failed` or `unverified`.
    pub state: crate::verify::judge::verdict::State,
    /// What was verified: `commit <sha>`, `pull request #<n>` while it is open, or
    /// `pull request #<n>, merged as <sha>` after its merge.
    pub source: String,
    pub summary: String,
    pub converged: u32,
    pub progressing: u32,
    pub failed: u32,
    pub unverified: u32,
    pub time: String,
}

/// The CRD as YAML, as `tagpin crd` prints it and `deploy/operator/crd.yaml` holds it.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt;
    let yaml = serde_yaml::to_string(&PinnedRepository::crd())?;
    Ok(format!(
        "# Generated by `tagpin crd` from the Rust types; do not edit.\n{yaml}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_crd_is_the_one_the_types_generate() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/operator/crd.yaml");
        let checked_in = std::fs::read_to_string(path).unwrap();
        let generated = crd_yaml().unwrap();
        assert!(
            checked_in == generated,
            "deploy/operator/crd.yaml is stale: run `tagpin crd > deploy/operator/crd.yaml`"
        );
    }

    #[test]
    fn the_crd_reads_as_kubectl_shows_it() {
        use kube::CustomResourceExt;
        let crd = PinnedRepository::crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.short_names,
            Some(vec!["pinrepo".to_string()])
        );
        let version = &crd.spec.versions[0];
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Ready", "Status", "Last Pin", "Verdict", "Age"]);
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let schema = serde_json::to_value(&version.schema).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], serde_json::json!(["repository"]));
        assert_eq!(
            spec["properties"]["mode"]["enum"],
            serde_json::json!(["commit", "pull-request"])
        );
        assert_eq!(
            spec["properties"]["promotion"]["properties"]["stages"]["items"]["properties"]["soak"]
                ["x-kubernetes-int-or-string"],
            true
        );
    }

    #[test]
    fn the_spec_travels_as_the_api_server_holds_it() {
        let object: PinnedRepository = serde_json::from_value(serde_json::json!({
            "apiVersion": "tagpin.dev/v1alpha1",
            "kind": "PinnedRepository",
            "metadata": {"name": "web", "namespace": "team-a", "generation": 2},
            "spec": {"repository": {"url": "https://git.example/a.git"}, "paths": ["apps"]},
            "status": {"observedGeneration": 1, "conditions": []}
        }))
        .unwrap();
        assert_eq!(object.spec.fields["paths"], serde_json::json!(["apps"]));
        assert_eq!(object.status.unwrap().observed_generation, Some(1));
    }
}
