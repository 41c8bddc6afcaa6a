//! What a promotion says: the pull request body (or commit message) carrying the evidence that
//! the digests converged in the source stage, and the plan block the verifier reads after
//! the merge. Pure text from data.

use std::time::Duration;

use crate::forge::ChangeRequestNoun;
use crate::proposal::{body, message, PlanBlock};
use crate::verify::judge::check::{Check, Expectations};
use crate::verify::judge::report;

use super::gate::Gate;

/// The facts a promotion rests on.
#[derive(Clone, Copy)]
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
    /// The source now pins other digests than the pull request proposes (its gate and
    /// verdict are about those).
    pub moved_on: bool,
    /// How the forge names the change request the body is for.
    pub noun: ChangeRequestNoun,
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
    if e.moved_on {
        out.push_str(&format!(
            "{} now pins other digests than this {cr} proposes; the gate above is about those, and this {cr} is updated to them once they pass it.\n\n",
            e.source,
            cr = e.noun.word()
        ));
    }
    if !e.gate.is_open() {
        out.push_str(&format!(
            "The evidence does not hold right now, so this {} should not be merged yet; tagpin updates it when {} converges again.\n\n",
            e.noun.word(),
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
pub(crate) fn commit_message(e: &Evidence<'_>, block: &PlanBlock) -> String {
    let mut message = title(block, e.source, e.target);
    message.push_str("\n\n");
    message.push_str(&message::pin_lines(block));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Action, Change};
    use crate::verify::judge::verdict::State;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn block() -> PlanBlock {
        let change = Change {
            file: "overlays/production/kustomization.yaml".into(),
            line: 4,
            workload: crate::workload::Owner::Kustomization,
            container: "web".into(),
            image: "ghcr.io/acme/web:1.4.2".into(),
            old_value: String::new(),
            new_value: A.into(),
            old_digest: None,
            new_digest: A.parse().unwrap(),
            old_tag: Some("1.4.1".into()),
            new_tag: Some("1.4.2".into()),
            action: Action::Update,
            signature: None,
            provenance: None,
            age: None,
        };
        PlanBlock::new("main", &[change])
    }

    fn check(state: State, summary: &str) -> Check {
        Check {
            state,
            summary: summary.into(),
            verdicts: Vec::new(),
            gitops: Default::default(),
        }
    }

    fn render_with(gate: &Gate, check: &Check) -> String {
        render_moved(gate, check, false)
    }

    fn render_moved(gate: &Gate, check: &Check, moved_on: bool) -> String {
        let expectations = Expectations::default();
        let e = Evidence {
            source: "staging",
            target: "production",
            branch: "main",
            source_commit: "3f2a9c1d4e5b",
            soak: Duration::from_secs(1800),
            gate,
            check,
            expectations: &expectations,
            moved_on,
            noun: ChangeRequestNoun::PullRequest,
        };
        render(&e, &block())
    }

    #[test]
    fn the_body_carries_the_evidence_and_a_plan_block_the_verifier_reads() {
        let body = render_with(
            &Gate::Open {
                since: 1_795_000_000,
            },
            &check(State::Converged, "3 of 3 pods on the pinned digest"),
        );
        assert!(
            body.contains("**Gate:** ✅ staging converged since 2026-"),
            "{body}"
        );
        assert!(body.contains("(soak 30m held)"), "{body}");
        assert!(body.contains("`main` at `3f2a9c1d4e5b`"), "{body}");
        assert!(body.contains("### staging: Converged"), "{body}");
        assert!(body.contains("(from `1.4.1`)"), "{body}");
        assert_eq!(body::parse(&body), Some(block()));
        assert!(!body.contains("should not be merged"), "{body}");
    }

    #[test]
    fn a_closed_gate_says_why_and_keeps_the_plan_block() {
        let gate = Gate::Refused {
            state: State::Failed,
            reason: "shop/Deployment/web: CrashLoopBackOff".into(),
        };
        let body = render_with(&gate, &check(State::Failed, "web failed"));
        assert!(
            body.contains("**Gate:** ❌ staging is failed: shop/Deployment/web: CrashLoopBackOff"),
            "{body}"
        );
        assert!(body.contains("should not be merged yet"), "{body}");
        assert_eq!(body::parse(&body), Some(block()));
    }

    #[test]
    fn a_pull_request_the_source_moved_on_from_says_so() {
        let gate = Gate::Soaking {
            since: 1_795_000_000,
            remaining_seconds: 600,
            restarted: None,
        };
        let converged = check(State::Converged, "ok");
        let body = render_moved(&gate, &converged, true);
        assert!(
            body.contains("staging now pins other digests than this pull request proposes"),
            "{body}"
        );
        assert!(!render_with(&gate, &converged).contains("now pins other digests"));
    }

    #[test]
    fn titles_and_commit_messages_name_both_stages() {
        assert_eq!(
            title(&block(), "staging", "production"),
            "Promote 1 image(s) from staging to production"
        );
        let expectations = Expectations::default();
        let converged = check(State::Converged, "ok");
        let e = Evidence {
            source: "staging",
            target: "production",
            branch: "main",
            source_commit: "3f2a9c1d4e5b",
            soak: Duration::ZERO,
            gate: &Gate::Open {
                since: 1_795_000_000,
            },
            check: &converged,
            expectations: &expectations,
            moved_on: false,
            noun: ChangeRequestNoun::PullRequest,
        };
        let message = commit_message(&e, &block());
        assert!(message.starts_with("Promote 1 image(s) from staging to production\n\n"));
        assert!(
            message.contains(&format!("(unpinned) -> 1.4.2@{A}")),
            "{message}"
        );
        assert!(
            message.contains("Evidence: staging at 3f2a9c1d4e5b; staging converged since"),
            "{message}"
        );
    }
}
