//! What a tagpin change request says: a table for people and a plan block for machines.
//!
//! The plan block ([`super::PlanBlock`]) travels as JSON inside an HTML comment, invisible on
//! the rendered page. This module only renders it into a body and parses it back; the forge
//! carries the text, and knows nothing of what it says.

use super::{PlanBlock, PLAN_VERSION};

/// Opens the hidden plan block in a PR body.
const PLAN_START: &str = "<!-- tagpin-plan";
const PLAN_END: &str = "-->";

/// The pull request body: a sentence, a table, and the plan block.
pub fn render(block: &PlanBlock) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "tagpin pins these images on `{}` to the digests their tags point to now, so every node runs the same image.\n\n",
        block.target
    ));
    out.push_str(&pins_table(block));
    out.push('\n');
    out.push_str(&plan_block(block));
    out
}

/// The fields a `# tagpin: hold` comment keeps where they are, below the pins: what a
/// reviewer would otherwise expect to move. Empty when nothing is held.
pub(crate) fn held_table(held: &[crate::plan::Held]) -> String {
    if held.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n**Held** (kept where they are by a `# tagpin: hold` comment, a revert, or a digest \
         younger than its minimum age):\n\n\
         | File | Workload | Container | Held at | Would move to | Why |\n|---|---|---|---|---|---|\n",
    );
    for h in held {
        out.push_str(&format!(
            "| `{}:{}` | {} | {} | `{}` | `{}` | {} |\n",
            h.file.display(),
            h.line,
            h.workload,
            h.container,
            h.value,
            h.would_be,
            h.reason.replace('|', "\\|")
        ));
    }
    out
}

/// One row per field that moves: file, workload, container, image (and the tag it moved
/// from), old and new digest.
pub(crate) fn pins_table(block: &PlanBlock) -> String {
    let mut out = String::new();
    out.push_str("| File | Workload | Container | Image | Old digest | New digest |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for pin in &block.pins {
        let moved = match &pin.old_tag {
            Some(old_tag) => format!(" (from `{old_tag}`)"),
            None => String::new(),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | `{}`{moved} | {} | `{}` |\n",
            pin.file,
            pin.workload,
            pin.container,
            pin.image,
            pin.old_digest
                .as_ref()
                .map_or("(none)".to_string(), |d| format!("`{}`", d.short())),
            pin.new_digest.short(),
        ));
    }
    out
}

/// The hidden plan block alone, for bodies that say more than [`render`] (promotions).
pub(crate) fn plan_block(block: &PlanBlock) -> String {
    let json = serde_json::to_string_pretty(block).unwrap_or_default();
    format!("{PLAN_START}\n{json}\n{PLAN_END}\n")
}

/// Reads the plan block back from a PR body; `None` when there is none or it is unreadable.
pub fn parse(body: &str) -> Option<PlanBlock> {
    let start = body.find(PLAN_START)? + PLAN_START.len();
    let end = start + body[start..].find(PLAN_END)?;
    let block: PlanBlock = serde_json::from_str(body[start..end].trim()).ok()?;
    (block.version == PLAN_VERSION).then_some(block)
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::message::commit_message;
    use super::super::Pin;
    use super::*;

    pub(in crate::proposal) fn block() -> PlanBlock {
        PlanBlock {
            version: PLAN_VERSION,
            target: "main".into(),
            pins: vec![Pin::first(
                "apps/web.yaml",
                "shop/Deployment/web",
                "ghcr.io/acme/web:1.0",
                "ghcr.io/acme/web:1.0@sha256:1111111111111111111111111111111111111111111111111111111111111111",
            )],
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
        a.pins[0].old_digest = Some(
            "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                .parse()
                .unwrap(),
        );
        b.pins[0].old_digest = None;
        assert_eq!(a.promises(), b.promises());
    }

    #[test]
    fn a_tag_moved_by_a_policy_is_said_in_the_table_and_the_commit_message() {
        let mut moved = block();
        moved.pins[0].old_tag = Some("0.9".into());
        moved.pins[0].new_tag = Some("1.0".into());
        let body = render(&moved);
        assert!(
            body.contains("| `ghcr.io/acme/web:1.0` (from `0.9`) | (none) |"),
            "{body}"
        );
        assert_eq!(parse(&body), Some(moved.clone()));
        let message = commit_message("Pin {count}", &moved);
        assert!(
            message.contains("/app): 0.9 (unpinned) -> 1.0@sha256:1111"),
            "{message}"
        );
        // Without a moved tag, the plan block reads exactly as before policies.
        assert!(!render(&block()).contains("old_tag"));
    }
}
