//! What a promotion says: the pull request body (or commit message) carrying the evidence that
//! the digests converged in the source stage, and the plan block the verifier reads after
//! the merge. Pure text from data.

use std::time::Duration;

use crate::forge::body;
use crate::proposal::PlanBlock;
use crate::verify::{report, Check, Expectations};

use super::gate::Gate;

/// The facts a promotion rests on.
pub struct Evidence<'e> {
    pub source: &'e str,
    pub target: &'e str,
    /// The branch both stages live on, and the commit the source stage was verified at.
    pub branch: &'e str,
    pub source_commit: &'e str,
    pub soak: Duration,
    pub gate: &'e Gate,
    /// The source stage's verdict now, and what it was checked against.
    pub check: &'e Check,
    pub expectations: &'e Expectations,
}

/// `Promote 2 image(s) from staging to production`.
pub fn title(block: &PlanBlock, source: &str, target: &str) -> String {
    let images = images(block);
    format!(
        "Promote {} image(s) from {source} to {target}",
        images.len()
    )
}

/// The pull request body: the gate, what moves, the source's verdict, the plan block.
pub fn render(e: &Evidence<'_>, block: &PlanBlock) -> String {
    let mark = match e.gate {
        Gate::Open { .. } => "✅",
        Gate::Soaking { .. } | Gate::Waiting { .. } => "⏳",
        Gate::Refused { .. } => "❌",
    };
    let mut out = format!(
        "tagpin promotes to **{}** the exact digests that converged in **{}**. Nothing was resolved at the registry: these are the digests {} runs.\n\n",
        e.target, e.source, e.source
    );
    out.push_str(&format!(
        "**Gate:** {mark} {}\n\n",
        e.gate.describe(e.source, e.soak)
    ));
    if !e.gate.is_open() {
        out.push_str(&format!(
            "The evidence does not hold right now, so this pull request should not be merged yet; tagpin updates it when {} converges again.\n\n",
            e.source
        ));
    }
    out.push_str(&format!(
        "**Source:** `{}` at `{}`, {} verified on its own cluster.\n\n",
        e.branch, e.source_commit, e.source
    ));
    out.push_str(&body::pins_table(block));
    out.push_str(&format!(
        "\n### {}: {}\n\n{}\n\n",
        e.source,
        report::state_word(e.check.state),
        e.check.summary
    ));
    out.push_str(&report::tables(e.check, e.expectations));
    out.push('\n');
    out.push_str(&body::plan_block(block));
    out
}

/// The commit message of a promotion in commit mode: the title, then one line per field and
/// the evidence in two lines.
pub fn commit_message(e: &Evidence<'_>, block: &PlanBlock) -> String {
    let mut message = title(block, e.source, e.target);
    message.push_str("\n\n");
    for pin in &block.pins {
        message.push_str(&format!(
            "{} ({} {}/{}): -> {}\n",
            pin.image, pin.file, pin.workload, pin.container, pin.new_value
        ));
    }
    message.push_str(&format!(
        "\nEvidence: {} at {}; {}.\n",
        e.source,
        e.source_commit,
        e.gate.describe(e.source, e.soak)
    ));
    message
}

fn images(block: &PlanBlock) -> Vec<&str> {
    let mut images: Vec<&str> = block.pins.iter().map(|p| p.image.as_str()).collect();
    images.sort();
    images.dedup();
    images
}
