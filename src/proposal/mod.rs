//! What a change proposes: which image fields move to which digests, and the text that says so.
//!
//! tagpin keeps no local state. The proposal is recorded in the pull request it opens (see
//! [`body`], which renders and parses it), so that a later pass can tell "same change, already
//! proposed" from "a digest moved again", and the verifier can learn what to expect in the
//! cluster from the pull request alone. A commit says the same in its message ([`message`]),
//! which commit mode writes with no forge at all. It is domain data: the planner makes it, the
//! writer and the forge carry it, the verifier reads it.

pub mod body;
pub mod message;

use serde::{Deserialize, Serialize};

use crate::plan::Change;
use crate::reference::Digest;
use crate::workload::Owner;

/// Bumped if the block's shape ever changes incompatibly.
pub(crate) const PLAN_VERSION: u32 = 1;

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
    /// `namespace/Kind/name`, `Kind/name`, or `kustomization`.
    pub workload: Owner,
    pub container: String,
    pub image: String,
    pub new_value: String,
    pub new_digest: Digest,
    #[serde(default)]
    pub old_digest: Option<Digest>,
    /// The tag before and after, when a policy moved it; absent otherwise (and in blocks
    /// written before policies existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tag: Option<String>,
}

#[cfg(test)]
impl Pin {
    /// A pin of container `app` of `workload` in `file`, moving `image` to `new_value` (a
    /// reference ending in `@<digest>`), with no digest or tag before.
    pub(crate) fn first(file: &str, workload: &str, image: &str, new_value: &str) -> Pin {
        let (_, digest) = new_value
            .rsplit_once('@')
            .expect("a reference with a digest");
        Pin {
            file: file.into(),
            workload: workload.parse().unwrap(),
            container: "app".into(),
            image: image.into(),
            new_value: new_value.into(),
            new_digest: digest.parse().unwrap(),
            old_digest: None,
            old_tag: None,
            new_tag: None,
        }
    }
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
                new_digest: c.new_digest.clone(),
                old_digest: c.old_digest.clone(),
                old_tag: c.old_tag.clone(),
                new_tag: c.new_tag.clone(),
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
    pub fn promises(&self) -> Vec<(String, Digest)> {
        let mut p: Vec<(String, Digest)> = self
            .pins
            .iter()
            .map(|pin| (pin.image.clone(), pin.new_digest.clone()))
            .collect();
        p.sort();
        p.dedup();
        p
    }
}
