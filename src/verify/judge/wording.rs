//! How the verdict speaks: the lines a person reads in a commit status, a comment or a terminal.
//!
//! The conditions decide; this module only words what they found. Text from the cluster
//! (kubelet and API messages) may hold newlines and control characters and be of any length,
//! while a commit status takes one line of a bounded length: the helpers that make any text fit
//! are kept together with the reason lines that need them.

use super::observed::LiveContainer;

/// How many pod names a reason line lists before "and N more": the line must stay readable in a
/// commit status or a terminal, and
/// [`Verdict::stale_pods`](super::verdict::Verdict::stale_pods) keeps the full list.
const PODS_NAMED_IN_REASON: usize = 5;

/// A pod that does not run the pinned digest, and whether it never started the container.
pub(super) struct Stale {
    pub(super) name: String,
    pub(super) not_started: bool,
}

/// `ImagePullBackOff on web-xyz: <kubelet message>`, plus the last exit for a crash loop, since
/// the back-off message alone does not say why the container died.
pub(super) fn fatal_line(reason: &str, pod: &str, status: &LiveContainer) -> String {
    let mut line = format!("{reason} on {pod}");
    if let Some(message) = status
        .waiting_message
        .as_deref()
        .map(one_line)
        .filter(|m| !m.is_empty())
    {
        line.push_str(": ");
        line.push_str(&message);
    }
    if reason == "CrashLoopBackOff" {
        let restarts = status.restart_count;
        let restarts = format!(
            "{restarts} {}",
            plural(
                usize::try_from(restarts).unwrap_or(0),
                "restart",
                "restarts"
            )
        );
        match status.last_terminated_reason.as_deref().map(one_line) {
            Some(last) if !last.is_empty() => {
                line.push_str(&format!(" (last exit: {last}, {restarts})"));
            }
            _ => line.push_str(&format!(" ({restarts})")),
        }
    }
    line
}

/// "2 of 3 pods still on an old digest: a, b", naming at most [`PODS_NAMED_IN_REASON`] pods.
pub(super) fn stale_line(stale: &[Stale], total: usize) -> String {
    let not_started = stale.iter().filter(|s| s.not_started).count();
    let (what, mark) = if not_started == 0 {
        ("still on an old digest", false)
    } else if not_started == stale.len() {
        ("not started yet", false)
    } else {
        ("not on the pinned digest yet", true)
    };
    let mut names: Vec<String> = stale
        .iter()
        .take(PODS_NAMED_IN_REASON)
        .map(|s| match (mark, s.not_started) {
            (false, _) => s.name.clone(),
            (true, true) => format!("{} (not started)", s.name),
            (true, false) => format!("{} (old digest)", s.name),
        })
        .collect();
    if stale.len() > PODS_NAMED_IN_REASON {
        names.push(format!("and {} more", stale.len() - PODS_NAMED_IN_REASON));
    }
    format!(
        "{} of {total} {} {what}: {}",
        stale.len(),
        plural(total, "pod", "pods"),
        names.join(", ")
    )
}

/// Text from the cluster as one line: kubelet and API messages may hold newlines and control
/// characters, which would break a status line or a terminal.
pub(super) fn one_line(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    cleaned.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters, ending in `…` when cut; never splits a character.
pub(super) fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let kept: String = s.chars().take(max.saturating_sub(1)).collect();
    let mut out = kept.trim_end().to_owned();
    out.push('…');
    out
}

/// `one` for exactly one, else `many`: reason lines count pods, restarts and images.
pub(super) fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::judge::samples::*;
    use crate::verify::judge::verdict::{State, STATUS_DESCRIPTION_MAX_CHARS};

    #[test]
    fn a_long_stale_list_names_five_pods_and_counts_the_rest() {
        let ids: Vec<String> = (0..8).map(|_| on(&old())).collect();
        let v = judge_default(deployment_with_pods(&ids));
        assert_eq!(v.stale_pods.len(), 8);
        assert_eq!(
            v.reason,
            "8 of 8 pods still on an old digest: web-0, web-1, web-2, web-3, web-4, and 3 more"
        );
    }

    #[test]
    fn a_multi_line_kubelet_message_becomes_one_line() {
        let live = found(
            workload(deployment(1, 1, 0, 0)),
            vec![waiting_pod(
                "web-xyz",
                "ErrImagePull",
                "rpc error:\n  not found\r\n",
            )],
        );
        assert_eq!(
            judge_default(live).reason,
            "ErrImagePull on web-xyz: rpc error: not found"
        );
    }

    #[test]
    fn crash_loop_back_off_is_failed_with_the_last_exit_and_restarts() {
        let mut p = pod("web-abc", &on(&pinned()));
        p.ready = false;
        p.containers[0].waiting_reason = Some("CrashLoopBackOff".to_owned());
        p.containers[0].waiting_message = Some("back-off 5m0s restarting failed container".into());
        p.containers[0].restart_count = 7;
        p.containers[0].last_terminated_reason = Some("OOMKilled".to_owned());
        let v = judge_default(found(workload(deployment(1, 1, 1, 0)), vec![p]));
        assert_eq!(v.state, State::Failed);
        assert_eq!(
            v.reason,
            "CrashLoopBackOff on web-abc: back-off 5m0s restarting failed container \
             (last exit: OOMKilled, 7 restarts)"
        );
    }

    #[test]
    fn old_and_unstarted_pods_are_told_apart() {
        let live = found(
            workload(deployment(2, 2, 2, 2)),
            vec![pod("web-0", &on(&old())), pod("web-1", "")],
        );
        assert_eq!(
            judge_default(live).reason,
            "2 of 2 pods not on the pinned digest yet: web-0 (old digest), web-1 (not started)"
        );
    }

    #[test]
    fn status_description_of_exactly_the_limit_is_not_cut() {
        let text = "é".repeat(STATUS_DESCRIPTION_MAX_CHARS);
        assert_eq!(truncate_chars(&text, STATUS_DESCRIPTION_MAX_CHARS), text);
    }
}
