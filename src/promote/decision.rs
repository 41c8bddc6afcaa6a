//! What a promotion pass writes, as a pure function of what it found: the gate, the carried
//! plan, the manifests and fields that could not be read, and the target stage's write mode.
//!
//! [`super::Promoter`] only gathers the inputs (the fetched tip, both stages' manifests, the
//! source stage's verdict and soak clock) and carries out the decision through
//! [`crate::writer`], so every rule here is tested with plain data.

use crate::config::WriteMode;
use crate::plan::Plan;

use super::gate::Gate;

/// What one promotion pass writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Commit the carried digests on the branch (commit mode). `dry_run`: only say what would
    /// be committed.
    Commit { dry_run: bool },
    /// Open or update the promotion pull request with them (pull-request mode). `dry_run`:
    /// only say what it would propose.
    Propose { dry_run: bool },
    /// Nothing may be written (pull-request mode): an open promotion pull request keeps its
    /// digests while its body and status say why, or that the source has moved on. With none
    /// open, as [`Decision::Nothing`]. `dry_run`: edit and set nothing, only say what would be.
    HoldOpenPr { settled: bool, dry_run: bool },
    /// Nothing is written. `settled`: the gate is open, everything was read and the target
    /// already runs the source's digests (reported as nothing to do); otherwise the gate or the
    /// failures say why, and there is no outcome.
    Nothing { settled: bool },
}

/// Decides the write. A promotion is all or nothing: with any failure nothing is carried, so
/// the target never runs half of what the source was verified on.
pub(crate) fn decide(
    gate: &Gate,
    plan: &Plan,
    failures: &[String],
    mode: WriteMode,
    dry_run: bool,
) -> Decision {
    let may_write = gate.is_open() && failures.is_empty();
    let changes = !plan.files.is_empty();
    let settled = may_write && !changes;
    match (mode, may_write && changes) {
        (WriteMode::Commit, true) => Decision::Commit { dry_run },
        (WriteMode::PullRequest, true) => Decision::Propose { dry_run },
        (WriteMode::Commit, false) => Decision::Nothing { settled },
        (WriteMode::PullRequest, false) => Decision::HoldOpenPr { settled, dry_run },
    }
}

#[cfg(test)]
mod tests {
    use super::Decision::{Commit, HoldOpenPr, Nothing, Propose};
    use super::*;
    use crate::plan::FilePlan;
    use crate::verify::judge::verdict::State;

    const OPEN: Gate = Gate::Open {
        since: 1_700_000_000,
    };

    /// A carried plan that rewrites one file, or none.
    fn plan(changes: bool) -> Plan {
        let files = if changes {
            vec![FilePlan {
                path: "envs/production/web.yaml".into(),
                original: b"image: web:1@sha256:old\n".to_vec(),
                updated: b"image: web:1@sha256:new\n".to_vec(),
                diff: String::new(),
            }]
        } else {
            Vec::new()
        };
        Plan {
            files,
            ..Plan::default()
        }
    }

    fn closed_gates() -> Vec<Gate> {
        vec![
            Gate::Soaking {
                since: 1_700_000_000,
                remaining_seconds: 600,
                restarted: None,
            },
            Gate::Waiting {
                reason: "web: 1 of 2 pods updated".into(),
            },
            Gate::Refused {
                state: State::Failed,
                reason: "web: ImagePullBackOff".into(),
            },
        ]
    }

    fn unreadable() -> Vec<String> {
        vec!["envs/production/cache.yaml:2:7: did not find expected node content".into()]
    }

    const COMMIT: WriteMode = WriteMode::Commit;
    const PR: WriteMode = WriteMode::PullRequest;

    /// One call of `decide` and the decision it must give: whether the carried plan changes a
    /// file, whether a manifest could not be read, the target's mode and dry run.
    type Row = (bool, bool, WriteMode, bool, Decision);

    /// Nothing is written; an open promotion pull request is held.
    fn hold(settled: bool, dry_run: bool) -> Decision {
        HoldOpenPr { settled, dry_run }
    }

    /// Asserts every row with `gate`; a failing row is named by its inputs.
    fn assert_decides(gate: &Gate, rows: &[Row]) {
        for &(changes, unread, mode, dry_run, expected) in rows {
            let failures = if unread { unreadable() } else { Vec::new() };
            assert_eq!(
                decide(gate, &plan(changes), &failures, mode, dry_run),
                expected,
                "{gate:?}, changes: {changes}, unreadable: {unread}, {mode:?}, dry run: {dry_run}"
            );
        }
    }

    #[test]
    fn the_write_follows_from_the_gate_what_was_read_the_plan_and_the_mode() {
        assert_decides(
            &OPEN,
            &[
                // An open gate with digests to carry commits in commit mode...
                (true, false, COMMIT, false, Commit { dry_run: false }),
                (true, false, COMMIT, true, Commit { dry_run: true }),
                // ... and proposes in pull-request mode.
                (true, false, PR, false, Propose { dry_run: false }),
                (true, false, PR, true, Propose { dry_run: true }),
                // A failure blocks the whole promotion even with the gate open.
                (true, true, COMMIT, false, Nothing { settled: false }),
                (true, true, PR, false, hold(false, false)),
                // A target already on the source's digests is settled only when everything
                // was read.
                (false, false, COMMIT, false, Nothing { settled: true }),
                (false, false, PR, false, hold(true, false)),
                (false, true, COMMIT, false, Nothing { settled: false }),
            ],
        );
        // A closed gate writes nothing new and holds an open pull request.
        for gate in closed_gates() {
            assert_decides(
                &gate,
                &[
                    (true, false, COMMIT, false, Nothing { settled: false }),
                    (true, false, PR, false, hold(false, false)),
                    (false, false, PR, true, hold(false, true)),
                ],
            );
        }
    }
}
