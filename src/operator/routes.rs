//! Which objects a registry webhook concerns: each reconcile notes the image repositories
//! (`domain/repository`, as a registry webhook names them) its pass asked about, and a
//! delivery naming some reconciles the objects that asked about them, not the whole fleet.
//!
//! At 10,000 objects, a push of one tag used by ten of them reconciles those ten (and any
//! object not routed yet), so their commits come within seconds instead of after 10,000 ref
//! listings. What is safe when a name is not routed to anyone: every object whose last pass
//! read its manifests did not use it at that tip; a commit that starts using it is a change of
//! the repository, seen by that object's next pass (its ref listing), which resolves the tag
//! then anyway. Objects whose uses are not known (never reconciled, or no pass of theirs ever
//! read their manifests, or more repositories than [`MAX_REPOSITORIES_PER_OBJECT`]) are
//! reconciled on every delivery: nothing is missed for want of knowing.
//!
//! Bounded: one entry per object the operator watches (dropped when it is deleted), each with
//! at most [`MAX_REPOSITORIES_PER_OBJECT`] names.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use crate::mutex::lock;

/// An object noting more repositories than this is routed every delivery instead: what a
/// tenant writes never grows the index past this many names per object.
pub const MAX_REPOSITORIES_PER_OBJECT: usize = 1024;

/// What an object's last pass asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Uses {
    /// These repositories, and no other.
    Repositories(BTreeSet<String>),
    /// Too many to keep: every delivery concerns it.
    Any,
}

/// The index: objects (`namespace/name`) by the repositories they use, and back.
#[derive(Default)]
pub struct Routes {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    by_object: HashMap<String, Uses>,
    by_repository: HashMap<String, HashSet<String>>,
    /// Objects a delivery concerned whose reconcile has not started yet: it goes first.
    delivered: HashSet<String>,
}

impl State {
    fn unlink(&mut self, object: &str) -> Option<Uses> {
        let uses = self.by_object.remove(object)?;
        if let Uses::Repositories(repositories) = &uses {
            for repository in repositories {
                if let Some(objects) = self.by_repository.get_mut(repository) {
                    objects.remove(object);
                    if objects.is_empty() {
                        self.by_repository.remove(repository);
                    }
                }
            }
        }
        Some(uses)
    }

    fn link(&mut self, object: &str, uses: Uses) {
        if let Uses::Repositories(repositories) = &uses {
            for repository in repositories {
                self.by_repository
                    .entry(repository.clone())
                    .or_default()
                    .insert(object.to_string());
            }
        }
        self.by_object.insert(object.to_string(), uses);
    }
}

impl Routes {
    /// Notes what the pass of `object` asked about. `complete`: the pass read the object's
    /// manifests at its tip, so `asked` is all it uses; otherwise (a pass that failed before,
    /// at Git or at its Secrets) what it asked is added to what was known.
    pub fn record(&self, object: &str, asked: BTreeSet<String>, complete: bool) {
        let mut state = lock(&self.state);
        let before = state.unlink(object);
        let uses = match (complete, before) {
            (true, _) => Uses::Repositories(asked),
            (false, Some(Uses::Repositories(mut known))) => {
                known.extend(asked);
                Uses::Repositories(known)
            }
            (false, Some(Uses::Any)) => Uses::Any,
            // Never read its manifests: still not known.
            (false, None) => return,
        };
        let uses = match uses {
            Uses::Repositories(r) if r.len() > MAX_REPOSITORIES_PER_OBJECT => Uses::Any,
            uses => uses,
        };
        state.link(object, uses);
    }

    /// Forgets a deleted object.
    pub fn remove(&self, object: &str) {
        let mut state = lock(&self.state);
        state.unlink(object);
        state.delivered.remove(object);
    }

    /// A delivery concerned `objects`: their next reconciles go before scheduled ones.
    pub fn delivered<'a>(&self, objects: impl IntoIterator<Item = &'a str>) {
        let mut state = lock(&self.state);
        state
            .delivered
            .extend(objects.into_iter().map(str::to_string));
    }

    /// Whether a delivery concerned `object` since its last reconcile started (and no more).
    pub fn take_delivered(&self, object: &str) -> bool {
        lock(&self.state).delivered.remove(object)
    }

    /// Of `objects` (`namespace/name`, the operator's watched objects), those a delivery naming
    /// `repositories` concerns: those that asked about one of them, and those whose uses are
    /// not known.
    pub fn concerned<'a>(
        &self,
        repositories: &[String],
        objects: impl IntoIterator<Item = &'a str>,
    ) -> Vec<&'a str> {
        let state = lock(&self.state);
        let named: HashSet<&str> = repositories
            .iter()
            .filter_map(|r| state.by_repository.get(r))
            .flatten()
            .map(String::as_str)
            .collect();
        objects
            .into_iter()
            .filter(|object| {
                named.contains(object)
                    || !matches!(state.by_object.get(*object), Some(Uses::Repositories(_)))
            })
            .collect()
    }

    /// Objects routed now.
    pub fn len(&self) -> usize {
        lock(&self.state).by_object.len()
    }

    /// Whether no object is routed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    const FLEET: [&str; 4] = ["a/web", "a/api", "b/web", "b/new"];

    #[test]
    fn a_delivery_concerns_the_objects_using_it_and_those_not_known_yet() {
        let routes = Routes::default();
        routes.record("a/web", set(&["r.example/acme/web"]), true);
        routes.record("a/api", set(&["r.example/acme/api"]), true);
        routes.record("b/web", set(&["r.example/acme/web", "r.example/x"]), true);
        let web = routes.concerned(&names(&["r.example/acme/web"]), FLEET);
        assert_eq!(web, ["a/web", "b/web", "b/new"]);
        // Unknown to every object that read its manifests: only the one not known yet.
        let nobody = routes.concerned(&names(&["r.example/other"]), FLEET);
        assert_eq!(nobody, ["b/new"]);
    }

    #[test]
    fn a_complete_pass_replaces_what_was_known_and_a_failed_one_adds_to_it() {
        let routes = Routes::default();
        routes.record("a/web", set(&["r.example/acme/web"]), true);
        routes.record("a/web", set(&["r.example/acme/api"]), true);
        assert_eq!(
            routes.concerned(&names(&["r.example/acme/web"]), ["a/web"]),
            Vec::<&str>::new()
        );
        // A pass that failed at Git asked nothing: what was known stays.
        routes.record("a/web", set(&[]), false);
        assert_eq!(
            routes.concerned(&names(&["r.example/acme/api"]), ["a/web"]),
            ["a/web"]
        );
        // One that never read its manifests is not known: every delivery concerns it.
        routes.record("b/new", set(&["r.example/acme/web"]), false);
        assert_eq!(routes.concerned(&[], ["b/new"]), ["b/new"]);
    }

    #[test]
    fn the_index_is_bounded_per_object_and_forgets_deleted_objects() {
        let routes = Routes::default();
        let many: BTreeSet<String> = (0..=MAX_REPOSITORIES_PER_OBJECT)
            .map(|i| format!("r.example/{i}"))
            .collect();
        routes.record("a/web", many, true);
        assert_eq!(routes.concerned(&[], ["a/web"]), ["a/web"]);
        assert!(lock(&routes.state).by_repository.is_empty());
        routes.record("a/api", set(&["r.example/acme/api"]), true);
        routes.delivered(["a/api"]);
        routes.remove("a/api");
        routes.remove("a/web");
        assert!(routes.is_empty());
        assert!(!routes.take_delivered("a/api"), "forgotten with the object");
        assert!(lock(&routes.state).by_repository.is_empty());
    }
}
