//! The verdict as people read it on the pull request: one comment, kept up to date.

use super::verdict::{State, Verdict};
use crate::forge::body::short;

/// Hidden marker by which tagpin finds its own comment again, whoever posted it.
pub const COMMENT_MARKER: &str = "<!-- tagpin-verify -->";
/// The commit status context tagpin sets.
pub const STATUS_CONTEXT: &str = "tagpin/converged";

/// The comment body: a headline with the overall state, then one row per container.
pub fn comment(state: State, summary: &str, verdicts: &[Verdict], unplaced: &[String]) -> String {
    let mut out = format!(
        "{COMMENT_MARKER}\n### tagpin: cluster {}\n\n{summary}\n\n",
        state_word(state)
    );
    out.push_str(
        "| Workload | Container | Pinned digest | Pods on it / total | Verdict | Reason |\n",
    );
    out.push_str("|---|---|---|---|---|---|\n");
    for v in verdicts {
        out.push_str(&format!(
            "| {} | {} | `{}` | {} / {} | {} | {} |\n",
            v.workload,
            v.container,
            short(&v.pinned_digest),
            v.pods_on_pinned,
            v.pods_total,
            state_word(v.state),
            escape_cell(&v.reason),
        ));
    }
    if !unplaced.is_empty() {
        out.push_str(&format!(
            "\nNot verified (pinned through a kustomization, no workload named): {}\n",
            unplaced.join(", ")
        ));
    }
    out
}

pub fn state_word(state: State) -> &'static str {
    match state {
        State::Converged => "Converged",
        State::Progressing => "Progressing",
        State::Failed => "Failed",
    }
}

/// Table cells cannot hold `|` or line breaks.
fn escape_cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_never_break_the_table() {
        assert_eq!(escape_cell("a|b\nc"), "a\\|b c");
        assert_eq!(short("sha256:0f152bc1261aea012bbf"), "sha256:0f152bc1261a");
    }
}
