//! The Git mirrors of the objects, one directory each under `--cache-dir/<namespace>/<name>`,
//! removed with their object: a deleted object's repository would otherwise stay on the
//! controller's disk for ever, and tenants can create and delete objects at will.
//!
//! A deletion the watch reports removes its directory at once; when the watch (re)lists, every
//! directory whose object is no longer there goes too, which covers objects deleted while the
//! controller was down. Each shard needs a cache directory of its own (as each pod of
//! `deploy/operator` has its own `emptyDir`): another shard's objects are not in this one's
//! list.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The mirror directories under one cache directory.
#[derive(Debug, Clone)]
pub struct Mirrors {
    cache_dir: PathBuf,
    /// Only this namespace's directories are this controller's (`--watch-namespace`).
    namespace: Option<String>,
}

impl Mirrors {
    pub fn new(cache_dir: PathBuf, namespace: Option<String>) -> Mirrors {
        Mirrors {
            cache_dir,
            namespace,
        }
    }

    /// The directory of object `namespace/name`.
    pub fn dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.cache_dir.join(namespace).join(name)
    }

    /// Removes the directory of a deleted object.
    pub fn remove(&self, namespace: &str, name: &str) {
        remove_dir(&self.dir(namespace, name));
    }

    /// Removes the directory of every object not in `objects` (`(namespace, name)`).
    pub fn sweep(&self, objects: &BTreeSet<(String, String)>) {
        for (namespace, name) in stale(&self.present(), objects) {
            remove_dir(&self.dir(&namespace, &name));
        }
    }

    /// The `(namespace, name)` directories on disk.
    fn present(&self) -> Vec<(String, String)> {
        let namespaces: Vec<String> = match &self.namespace {
            Some(namespace) => vec![namespace.clone()],
            None => subdirectories(&self.cache_dir),
        };
        namespaces
            .into_iter()
            .flat_map(|namespace| {
                subdirectories(&self.cache_dir.join(&namespace))
                    .into_iter()
                    .map(move |name| (namespace.clone(), name))
            })
            .collect()
    }
}

/// The directories of `present` whose object is not among `objects`.
pub fn stale(
    present: &[(String, String)],
    objects: &BTreeSet<(String, String)>,
) -> Vec<(String, String)> {
    present
        .iter()
        .filter(|dir| !objects.contains(*dir))
        .cloned()
        .collect()
}

fn subdirectories(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect()
}

fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => tracing::info!("{}: removed the mirror of a deleted object", dir.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("{}: cannot remove: {e}", dir.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(namespace: &str, name: &str) -> (String, String) {
        (namespace.to_string(), name.to_string())
    }

    #[test]
    fn a_directory_whose_object_is_gone_is_stale() {
        let objects = BTreeSet::from([pair("team-a", "web"), pair("team-b", "web")]);
        let present = [
            pair("team-a", "web"),
            pair("team-a", "old"),
            pair("team-c", "web"),
        ];
        assert_eq!(
            stale(&present, &objects),
            [pair("team-a", "old"), pair("team-c", "web")]
        );
    }

    #[test]
    fn a_sweep_removes_only_the_directories_of_objects_that_are_gone() {
        let cache = tempfile::tempdir().unwrap();
        let mirrors = Mirrors::new(cache.path().to_path_buf(), None);
        for (namespace, name) in [("team-a", "web"), ("team-a", "old"), ("team-b", "api")] {
            std::fs::create_dir_all(mirrors.dir(namespace, name).join("objects")).unwrap();
        }
        mirrors.sweep(&BTreeSet::from([
            pair("team-a", "web"),
            pair("team-b", "api"),
        ]));
        assert!(mirrors.dir("team-a", "web").exists());
        assert!(mirrors.dir("team-b", "api").exists());
        assert!(!mirrors.dir("team-a", "old").exists());
        // Limited to one namespace: another namespace's directories are not looked at.
        let one = Mirrors::new(cache.path().to_path_buf(), Some("team-a".into()));
        one.sweep(&BTreeSet::new());
        assert!(!mirrors.dir("team-a", "web").exists());
        assert!(mirrors.dir("team-b", "api").exists());
    }
}
