//! What a tagpin pull request says: a table for people and a plan block for machines.
//!
//! tagpin keeps no local state. The plan block (JSON inside an HTML comment, invisible on the
//! rendered page) records exactly which digests the pull request promises, so that a later
//! pass can tell "same change, already proposed" from "a digest moved again", and the verifier
//! can learn what to expect in the cluster from the pull request alone.

use serde::{Deserialize, Serialize};

use crate::plan::Change;

/// Opens the hidden plan block in a PR body.
const PLAN_START: &str = "<!-- tagpin-plan";
const PLAN_END: &str = "-->";
/// Bumped if the block's shape ever changes incompatibly.
const PLAN_VERSION: u32 = 1;

/// What a pull request promises, as recorded in its body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanBlock {
    pub version: u32,
    /// The branch the pull request targets.
    pub target: String,
    pub pins: Vec<Pin>,
}

/// One image field moved to one digest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pin {
    pub file: String,
    pub workload: String,
    pub container: String,
    pub image: String,
    pub new_value: String,
    pub new_digest: String,
    #[serde(default)]
    pub old_digest: Option<String>,
}

impl PlanBlock {
    pub fn new(target: &str, changes: &[Change]) -> PlanBlock {
        let mut pins: Vec<Pin> = changes
            .iter()
            .map(|c| Pin {
                file: c.file.display().to_string(),
                workload: c.workload.clone(),
                container: c.container.clone(),
                image: c.image.clone(),
                new_value: c.new_value.clone(),
                new_digest: c.new_digest.to_string(),
                old_digest: c.old_digest.as_ref().map(|d| d.to_string()),
            })
            .collect();
        pins.sort();
        PlanBlock {
            version: PLAN_VERSION,
            target: target.to_string(),
            pins,
        }
    }

    /// The (image, digest) pairs promised: two plans that move the same images to the same
    /// digests are the same proposal, whatever the old digests were.
    pub fn promises(&self) -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = self
            .pins
            .iter()
            .map(|pin| (pin.image.clone(), pin.new_digest.clone()))
            .collect();
        p.sort();
        p.dedup();
        p
    }
}

/// The pull request body: a sentence, a table, and the plan block.
pub fn render(block: &PlanBlock) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "tagpin pins these images on `{}` to the digests their tags point to now, so every node runs the same image.\n\n",
        block.target
    ));
    out.push_str("| File | Workload | Container | Image | Old digest | New digest |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for pin in &block.pins {
        out.push_str(&format!(
            "| `{}` | {} | {} | `{}` | {} | `{}` |\n",
            pin.file,
            pin.workload,
            pin.container,
            pin.image,
            pin.old_digest
                .as_deref()
                .map_or("(none)".to_string(), |d| format!("`{}`", short(d))),
            short(&pin.new_digest),
        ));
    }
    let json = serde_json::to_string_pretty(block).unwrap_or_default();
    out.push_str(&format!("\n{PLAN_START}\n{json}\n{PLAN_END}\n"));
    out
}

/// Reads the plan block back from a PR body; `None` when there is none or it is unreadable.
pub fn parse(body: &str) -> Option<PlanBlock> {
    let start = body.find(PLAN_START)? + PLAN_START.len();
    let end = start + body[start..].find(PLAN_END)?;
    let block: PlanBlock = serde_json::from_str(body[start..end].trim()).ok()?;
    (block.version == PLAN_VERSION).then_some(block)
}

/// `sha256:0f152bc1261a` — enough to tell digests apart in a table.
pub fn short(digest: &str) -> &str {
    let cut = digest.find(':').map_or(0, |i| i + 1) + 12;
    digest.get(..cut).unwrap_or(digest)
}

/// Fills `{count}`, `{branch}` and `{images}` in a title or commit message template.
pub fn fill_template(template: &str, block: &PlanBlock) -> String {
    let mut images: Vec<&str> = block.pins.iter().map(|p| p.image.as_str()).collect();
    images.sort();
    images.dedup();
    template
        .replace("{count}", &images.len().to_string())
        .replace("{branch}", &block.target)
        .replace("{images}", &images.join(", "))
}

/// The commit message: the filled template, then one line per image moved.
pub fn commit_message(template: &str, block: &PlanBlock) -> String {
    let mut message = fill_template(template, block);
    message.push_str("\n\n");
    for pin in &block.pins {
        message.push_str(&format!(
            "{} ({} {}/{}): {} -> {}\n",
            pin.image,
            pin.file,
            pin.workload,
            pin.container,
            pin.old_digest.as_deref().unwrap_or("unpinned"),
            pin.new_digest
        ));
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> PlanBlock {
        PlanBlock {
            version: PLAN_VERSION,
            target: "main".into(),
            pins: vec![Pin {
                file: "apps/web.yaml".into(),
                workload: "shop/Deployment/web".into(),
                container: "app".into(),
                image: "ghcr.io/acme/web:1.0".into(),
                new_value: "ghcr.io/acme/web:1.0@sha256:1111111111111111111111111111111111111111111111111111111111111111".into(),
                new_digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111".into(),
                old_digest: None,
            }],
        }
    }

    #[test]
    fn the_plan_block_survives_a_round_trip_through_the_body() {
        let body = render(&block());
        assert_eq!(parse(&body), Some(block()));
        assert!(body.contains("| `apps/web.yaml` | shop/Deployment/web | app | `ghcr.io/acme/web:1.0` | (none) | `sha256:111111111111` |"), "{body}");
    }

    #[test]
    fn a_body_without_a_block_or_with_a_broken_one_has_no_plan() {
        assert_eq!(parse("just text"), None);
        assert_eq!(parse("<!-- tagpin-plan\n{not json\n-->"), None);
    }

    #[test]
    fn promises_ignore_where_the_digest_came_from() {
        let mut a = block();
        let mut b = block();
        a.pins[0].old_digest = Some("sha256:aa".into());
        b.pins[0].old_digest = None;
        assert_eq!(a.promises(), b.promises());
    }

    #[test]
    fn templates_fill_count_branch_and_images() {
        assert_eq!(
            fill_template("Pin {count} on {branch}: {images}", &block()),
            "Pin 1 on main: ghcr.io/acme/web:1.0"
        );
        let message = commit_message("Pin {count}", &block());
        assert!(message.starts_with("Pin 1\n\nghcr.io/acme/web:1.0 (apps/web.yaml shop/Deployment/web/app): unpinned -> sha256:1111"), "{message}");
    }
}
