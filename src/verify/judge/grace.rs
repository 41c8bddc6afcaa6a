//! Time for the GitOps tool to create what a new commit adds.
//!
//! The verifier judges a workload that does not exist as failed: from the cluster alone it
//! cannot tell a workload Argo CD or Flux has not created yet from one that will never exist.
//! Whoever verifies a commit it watched land (the controller after its own pin or after a
//! merge, the operator) knows one more thing: how long ago that was. For one interval after
//! it, a missing workload that no Argo CD or Flux object reports as applied at that commit is
//! progressing, "not created yet", so the verdict is not final and is asked again.
//!
//! Only failed turns into progressing, never anything into converged, and the headline is
//! summed up again by the verifier's own rule: nothing unchecked is ever reported converged.

use super::check::Check;
use super::verdict::{self, ConditionType, State, Unchecked, Verdict};
use crate::workload::WorkloadId;

/// The `Synced` reason of a verdict whose workload does not exist in the cluster.
pub(crate) const WORKLOAD_MISSING: &str = "WorkloadMissing";

/// Why a workload given time is progressing.
pub(crate) const NOT_CREATED_YET: &str =
    "not created yet: the workload does not exist in the cluster";

/// `check` with each missing workload that no Argo CD or Flux object reports as applied
/// turned progressing ("not created yet"), and its state and headline summed up again. Call
/// it only while the verified commit is young ([`crate::inflight::rule::is_young`]).
pub(crate) fn not_created_yet(check: Check, unchecked: Unchecked) -> Check {
    let applied: Vec<WorkloadId> = check
        .gitops
        .objects
        .iter()
        .filter(|o| o.synced)
        .flat_map(|o| o.workloads.iter().cloned())
        .collect();
    let awaited = |v: &Verdict| {
        v.state == State::Failed
            && v.condition(ConditionType::Synced)
                .is_some_and(|c| c.reason == WORKLOAD_MISSING)
            && !applied.contains(&v.workload)
    };
    if !check.verdicts.iter().any(awaited) {
        return check;
    }
    let mut check = check;
    for v in check.verdicts.iter_mut().filter(|v| awaited(v)) {
        v.state = State::Progressing;
        v.reason = NOT_CREATED_YET.to_string();
    }
    let (state, summary) = verdict::summarize(&check.verdicts, unchecked);
    check.state = state;
    check.summary = summary;
    check
}
