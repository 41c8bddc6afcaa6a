//! The verdict as people read it on the pull request: one comment, kept up to date.

use super::check::{Check, Expectations};
use super::verdict::State;

/// Hidden marker by which tagpin finds its own comment again, whoever posted it.
pub const COMMENT_MARKER: &str = "<!-- tagpin-verify -->";
/// The commit status context tagpin sets.
pub(crate) const STATUS_CONTEXT: &str = "tagpin/converged";

/// The comment body: a headline with the overall state, one row per container, the GitOps
/// objects that apply the pins, then what was not verified and why.
pub fn comment(check: &Check, expectations: &Expectations) -> String {
    let mut out = format!(
        "{COMMENT_MARKER}\n### tagpin: cluster {}\n\n{}\n\n",
        state_word(check.state),
        check.summary
    );
    out.push_str(&tables(check, expectations));
    out
}

/// The verdict without headline: one row per container, the GitOps objects, what was not
/// verified, and the manifests that could not be read. A promotion's evidence quotes it.
pub(crate) fn tables(check: &Check, expectations: &Expectations) -> String {
    let mut out = String::new();
    out.push_str(
        "| Workload | Container | Pinned digest | Pods on it / total | Verdict | Reason |\n",
    );
    out.push_str("|---|---|---|---|---|---|\n");
    for v in &check.verdicts {
        out.push_str(&format!(
            "| {} | {} | `{}` | {} / {} | {} | {} |\n",
            v.workload,
            v.container,
            v.pinned_digest.short(),
            v.pods_on_pinned,
            v.pods_total,
            state_word(v.state),
            escape_cell(&v.reason),
        ));
    }
    let finished: Vec<String> = check
        .verdicts
        .iter()
        .flat_map(|v| {
            v.finished_pods
                .iter()
                .map(move |p| format!("{} {p}", v.workload))
        })
        .collect();
    if !finished.is_empty() {
        out.push_str(&format!(
            "\nNot counted (ended, such as evicted, or being deleted): {}\n",
            escape_cell(&finished.join(", "))
        ));
    }
    if !check.gitops.objects.is_empty() {
        out.push_str("\n**GitOps:**\n\n");
        for object in &check.gitops.objects {
            out.push_str(&format!("- {}\n", escape_cell(&object.summary)));
        }
    }
    if check.not_verified(expectations).next().is_some() {
        out.push_str("\n**Not verified:**\n\n| Image | Where | Why |\n|---|---|---|\n");
        for n in check.not_verified(expectations) {
            out.push_str(&format!(
                "| `{}` | {} | {} |\n",
                n.image,
                escape_cell(&n.workload),
                escape_cell(&n.why())
            ));
        }
    }
    if !expectations.failures.is_empty() {
        out.push_str("\n**Manifests that could not be read** (they may hold pins):\n\n");
        for failure in &expectations.failures {
            out.push_str(&format!("- {}\n", escape_cell(failure)));
        }
    }
    out
}

pub fn state_word(state: State) -> &'static str {
    match state {
        State::Converged => "Converged",
        State::Progressing => "Progressing",
        State::Failed => "Failed",
        State::Unverified => "Unverified",
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
    }

    #[test]
    fn the_comment_names_the_gitops_objects_and_the_pins_they_could_not_place() {
        use crate::verify::judge::expected::{NotVerified, NotVerifiedReason};
        use crate::verify::judge::gitops::{Findings, ObjectReport, Tool};
        let pin = "1111111111111111111111111111111111111111";
        let check = Check {
            state: State::Unverified,
            summary: "1 pinned image matched no live workload; 0 converged".into(),
            verdicts: Vec::new(),
            gitops: Findings {
                objects: vec![ObjectReport {
                    tool: Tool::ArgoCd,
                    kind: "Application",
                    namespace: "argocd".into(),
                    name: "shop".into(),
                    synced: true,
                    revision: Some(pin.into()),
                    pin_commit: pin.into(),
                    health: "Healthy".into(),
                    health_message: None,
                    workloads: Vec::new(),
                    summary: "Argo CD Application argocd/shop: Synced to 1111111, Healthy".into(),
                }],
                not_verified: vec![NotVerified {
                    image: "ghcr.io/acme/web:1@sha256:2222".into(),
                    workload: "shop/Deployment/web".into(),
                    reason: NotVerifiedReason::NotInGitOpsInventory,
                    detail: None,
                }],
            },
        };
        let body = comment(&check, &Expectations::default());
        assert!(
            body.contains(
                "**GitOps:**\n\n- Argo CD Application argocd/shop: Synced to 1111111, Healthy\n"
            ),
            "{body}"
        );
        assert!(
            body.contains("| `ghcr.io/acme/web:1@sha256:2222` | shop/Deployment/web | the GitOps object applying it lists no such workload |"),
            "{body}"
        );
    }
}
