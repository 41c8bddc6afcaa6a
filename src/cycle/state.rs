//! What one repository's cycle remembers from one pass to the next.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::inflight::Memory;
use crate::registry::{ResolveKey, ResolveResult};
use crate::verify::Families;

/// One repository's memory across passes: what its verification found final (lost on
/// restart: one status read per change request rebuilds it), the registry answers a driver
/// keeps between passes (`tagpin run` until its schedule, the operator none), and the API
/// families the cluster serves.
#[derive(Default)]
pub struct RepoState {
    pub memory: Mutex<Memory>,
    pub answers: BTreeMap<ResolveKey, ResolveResult>,
    pub families: Families,
}

impl RepoState {
    /// A state holding `memory` only, as the operator keeps it per object between passes.
    pub fn remembering(memory: Memory) -> RepoState {
        RepoState {
            memory: Mutex::new(memory),
            ..RepoState::default()
        }
    }

    /// The memory, to be kept for the next pass.
    pub fn into_memory(self) -> Memory {
        self.memory
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
