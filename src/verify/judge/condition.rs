//! The Kubernetes-style conditions a verdict carries and the states they add up to, shared by
//! the judges of each condition (`verdict.rs` for `Synced`, `rollout.rs`, `pods.rs`).

use serde::{Deserialize, Serialize};

/// The overall judgement for one container, or for a whole set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Converged,
    Progressing,
    Failed,
    /// Something pinned was not checked (no live workload to check it on, or nothing selected
    /// at all): never reported as Converged.
    Unverified,
}

impl State {
    /// The same spelling as the serialized form, for human output.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Converged => "converged",
            State::Progressing => "progressing",
            State::Failed => "failed",
            State::Unverified => "unverified",
        }
    }
}

impl std::str::FromStr for State {
    type Err = UnknownState;

    /// The serialized spelling back (`converged`, `progressing`, `failed`, `unverified`).
    fn from_str(text: &str) -> Result<State, UnknownState> {
        [
            State::Converged,
            State::Progressing,
            State::Failed,
            State::Unverified,
        ]
        .into_iter()
        .find(|state| state.as_str() == text)
        .ok_or_else(|| UnknownState(text.to_string()))
    }
}

/// A spelling that is no [`State`].
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is no verdict state")]
pub struct UnknownState(pub String);

/// The three conditions a verdict always carries, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConditionType {
    Synced,
    RolledOut,
    DigestsMatch,
}

/// A Kubernetes condition status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// A Kubernetes-style condition, so that people and tools used to `kubectl describe` read the
/// verdict without a legend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: ConditionType,
    pub status: ConditionStatus,
    /// A CamelCase reason, stable enough to match on.
    pub reason: String,
    pub message: String,
}

/// One condition as judged, with what it means for the overall state.
pub(crate) struct Judged {
    pub(crate) condition: Condition,
    /// This condition alone makes the verdict Failed.
    pub(crate) failed: bool,
    /// The one-line reason to show when this condition decides the verdict.
    pub(crate) summary: String,
}

/// A condition from borrowed text, so every judgement can spell its own reason and message.
pub(crate) fn condition(
    type_: ConditionType,
    status: ConditionStatus,
    reason: &str,
    message: &str,
) -> Condition {
    Condition {
        type_,
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

/// A condition with its summary line, not failing the verdict by itself (callers that fail it
/// say so with `failed: true`).
pub(crate) fn judged(
    type_: ConditionType,
    status: ConditionStatus,
    reason: &str,
    message: String,
    summary: String,
) -> Judged {
    Judged {
        condition: condition(type_, status, reason, &message),
        failed: false,
        summary,
    }
}
