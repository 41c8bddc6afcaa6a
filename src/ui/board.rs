//! What the dashboard shows, shared between the driver that writes it after each cycle and the
//! HTTP side that reads it: each repository's [`RepoView`], its timeline of [`Event`]s (bounded,
//! newest first) and its delivery figures, when the delivery report has filled them in.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, RwLock};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::view::RepoView;
use crate::event::Event;

/// Events kept per repository: the timeline shows the last ones.
pub(crate) const TIMELINE_LENGTH: usize = 200;

/// Repositories kept: past this, updates of new ones are dropped (an operator watching more
/// objects than this shows the first).
pub(crate) const MAX_REPOSITORIES: usize = 10_000;

/// The dashboard's state. Cheap to clone: clones share it.
#[derive(Clone, Default)]
pub struct Board {
    inner: Arc<RwLock<Inner>>,
}

#[derive(Default)]
struct Inner {
    repositories: BTreeMap<String, Entry>,
    /// Bumped on every change, so that a page asks for nothing when nothing changed.
    version: u64,
}

struct Entry {
    view: RepoView,
    timeline: VecDeque<Event>,
    delivery: Option<serde_json::Value>,
}

/// Which repositories a viewer may see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visible {
    All,
    /// Those of these namespaces only (a repository without a namespace is never visible).
    Namespaces(BTreeSet<String>),
}

impl Visible {
    fn shows(&self, view: &RepoView) -> bool {
        match self {
            Visible::All => true,
            Visible::Namespaces(allowed) => view
                .namespace
                .as_ref()
                .is_some_and(|ns| allowed.contains(ns)),
        }
    }
}

/// One repository as the overview lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// The repository's id in page addresses (a hash of its key: the key may be a URL).
    pub id: String,
    #[serde(flatten)]
    pub view: RepoView,
}

/// One repository's page: its view, timeline (newest first) and delivery figures.
#[derive(Debug, Clone, Serialize)]
pub struct Detail {
    pub id: String,
    #[serde(flatten)]
    pub view: RepoView,
    pub timeline: Vec<Event>,
    /// `null` until the delivery report fills it in.
    pub delivery: Option<serde_json::Value>,
}

/// The id of a repository key in page addresses.
pub fn id_of(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

impl Board {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Replaces the view of the repository `key`.
    pub fn update(&self, key: &str, view: RepoView) {
        self.edit(key, || view.clone(), |v| *v = view.clone());
    }

    /// Edits the view of `key` in place, made by `new` the first time.
    pub fn edit(
        &self,
        key: &str,
        new: impl FnOnce() -> RepoView,
        edit: impl FnOnce(&mut RepoView),
    ) {
        let mut inner = self.write();
        if !inner.repositories.contains_key(key) && inner.repositories.len() >= MAX_REPOSITORIES {
            return;
        }
        let entry = inner
            .repositories
            .entry(key.to_string())
            .or_insert_with(|| Entry {
                view: new(),
                timeline: VecDeque::new(),
                delivery: None,
            });
        edit(&mut entry.view);
        inner.version += 1;
    }

    /// Forgets the repository `key` (an object deleted).
    pub fn remove(&self, key: &str) {
        let mut inner = self.write();
        if inner.repositories.remove(key).is_some() {
            inner.version += 1;
        }
    }

    /// Adds events to their repositories' timelines (by `Event::repository`), newest first,
    /// each once (by [`Event::id`]: a later sighting replaces the earlier), at most
    /// [`TIMELINE_LENGTH`] each. Events of repositories not on the board are dropped.
    pub fn record(&self, events: Vec<Event>) {
        let mut inner = self.write();
        let mut changed = false;
        for event in events {
            let Some(entry) = inner.repositories.get_mut(&event.repository) else {
                continue;
            };
            let id = event.id();
            entry.timeline.retain(|e| e.id() != id);
            let at = entry
                .timeline
                .iter()
                .position(|e| e.time <= event.time)
                .unwrap_or(entry.timeline.len());
            entry.timeline.insert(at, event);
            entry.timeline.truncate(TIMELINE_LENGTH);
            changed = true;
        }
        if changed {
            inner.version += 1;
        }
    }

    /// Sets the delivery figures of `key` (the delivery report, as JSON).
    pub fn set_delivery(&self, key: &str, figures: Option<serde_json::Value>) {
        let mut inner = self.write();
        if let Some(entry) = inner.repositories.get_mut(key) {
            entry.delivery = figures;
            inner.version += 1;
        }
    }

    /// A number that changes whenever anything on the board does.
    pub fn version(&self) -> u64 {
        self.read().version
    }

    /// The namespaces of the repositories on the board (operator: what to ask access for).
    pub fn namespaces(&self) -> BTreeSet<String> {
        let inner = self.read();
        inner
            .repositories
            .values()
            .filter_map(|e| e.view.namespace.clone())
            .collect()
    }

    /// Every repository `visible` shows, by key.
    pub fn overview(&self, visible: &Visible) -> Vec<Listed> {
        let inner = self.read();
        inner
            .repositories
            .iter()
            .filter(|(_, e)| visible.shows(&e.view))
            .map(|(key, e)| Listed {
                id: id_of(key),
                view: e.view.clone(),
            })
            .collect()
    }

    /// The repository of `id`, when `visible` shows it.
    pub fn detail(&self, id: &str, visible: &Visible) -> Option<Detail> {
        let inner = self.read();
        let (key, entry) = inner
            .repositories
            .iter()
            .find(|(key, e)| id_of(key) == id && visible.shows(&e.view))?;
        Some(Detail {
            id: id_of(key),
            view: entry.view.clone(),
            timeline: entry.timeline.iter().cloned().collect(),
            delivery: entry.delivery.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    fn view(key: &str, namespace: Option<&str>) -> RepoView {
        let config = crate::config::Config::parse(
            "repository: {url: 'https://git.example/a.git', branch: main}\n",
            std::path::Path::new("tagpin.yaml"),
        )
        .unwrap();
        let mut view = RepoView::new(key, &config, 0);
        view.namespace = namespace.map(str::to_string);
        view
    }

    fn event(repository: &str, kind: EventKind, time: i64) -> Event {
        Event {
            kind,
            time,
            repository: repository.into(),
            stage: "main".into(),
            image: None,
            digest: None,
            commit: Some(format!("{time:040}")),
            change_request: None,
            reason: None,
        }
    }

    #[test]
    fn the_timeline_is_newest_first_each_event_once_and_bounded() {
        let board = Board::default();
        board.update("a", view("a", None));
        board.record(vec![event("a", EventKind::Pinned, 10)]);
        board.record(vec![
            event("a", EventKind::Converged, 20),
            event("a", EventKind::Pinned, 10),
            event("elsewhere", EventKind::Pinned, 5),
        ]);
        let detail = board.detail(&id_of("a"), &Visible::All).unwrap();
        let kinds: Vec<_> = detail.timeline.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, vec![EventKind::Converged, EventKind::Pinned]);
        let many = (0..TIMELINE_LENGTH as i64 + 50)
            .map(|t| event("a", EventKind::Failed, 100 + t))
            .collect();
        board.record(many);
        let detail = board.detail(&id_of("a"), &Visible::All).unwrap();
        assert_eq!(detail.timeline.len(), TIMELINE_LENGTH);
        assert_eq!(detail.timeline[0].time, 100 + TIMELINE_LENGTH as i64 + 49);
    }

    #[test]
    fn a_viewer_of_one_namespace_never_sees_another_s_repository() {
        let board = Board::default();
        board.update("team-a/web", view("team-a/web", Some("team-a")));
        board.update("team-b/api", view("team-b/api", Some("team-b")));
        let team_a = Visible::Namespaces(["team-a".to_string()].into());
        let listed: Vec<_> = board
            .overview(&team_a)
            .into_iter()
            .map(|l| l.view.key)
            .collect();
        assert_eq!(listed, vec!["team-a/web".to_string()]);
        assert!(board.detail(&id_of("team-b/api"), &team_a).is_none());
        assert!(board.detail(&id_of("team-a/web"), &team_a).is_some());
        assert_eq!(board.overview(&Visible::All).len(), 2);
    }
}
