//! When tagpin first resolved a tag to a digest, for digests whose registry gives no build
//! time: kept in a small JSON file (`tagpin-first-seen.json` in the cache directory, beside
//! the mirror) so that a restart does not start a digest's age again.
//!
//! The file is read and written whole, under a process-wide lock, and replaced atomically
//! (written beside it, then renamed). A file that cannot be read or parsed counts as empty
//! (and is logged): the digests it named are then first seen again, so they wait longer,
//! never less. Past [`MAX_ENTRIES`] the oldest entries are dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use super::Subject;

/// The file's name in the cache directory.
pub(crate) const FILE_NAME: &str = "tagpin-first-seen.json";

/// How many digests the file remembers; past it the oldest are forgotten.
pub(crate) const MAX_ENTRIES: usize = 20_000;
/// The file's size at most: [`MAX_ENTRIES`] entries of about 100 bytes, with room.
const MAX_FILE_BYTES: u64 = 8 << 20;

/// Where first sightings are kept: a file, or (without a cache directory) this process only.
#[derive(Debug, Clone, Default)]
pub struct FirstSeen {
    path: Option<PathBuf>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    /// `registry/path@sha256:…` → Unix seconds.
    #[serde(default)]
    first_seen: BTreeMap<String, i64>,
}

/// The sightings of a process without a file, and the lock every file is written under.
fn memory() -> &'static Mutex<BTreeMap<String, i64>> {
    static MEMORY: OnceLock<Mutex<BTreeMap<String, i64>>> = OnceLock::new();
    MEMORY.get_or_init(|| Mutex::new(BTreeMap::new()))
}

fn key(subject: &Subject) -> String {
    format!("{}@{}", subject.image, subject.digest)
}

impl FirstSeen {
    /// Sightings kept in `cache_dir`'s [`FILE_NAME`].
    pub(crate) fn in_dir(cache_dir: &Path) -> FirstSeen {
        FirstSeen {
            path: Some(cache_dir.join(FILE_NAME)),
        }
    }

    /// Sightings kept for the life of this process only.
    pub(crate) fn in_memory() -> FirstSeen {
        FirstSeen { path: None }
    }

    /// When each of `subjects` was first seen, recording `now` for those never seen before.
    pub fn record(&self, subjects: &[Subject], now: i64) -> BTreeMap<Subject, i64> {
        let mut memory = memory().lock().unwrap_or_else(|p| p.into_inner());
        let Some(path) = &self.path else {
            return sightings(&mut memory, subjects, now);
        };
        let mut stored = read(path);
        let before = stored.first_seen.len();
        let seen = sightings(&mut stored.first_seen, subjects, now);
        if stored.first_seen.len() != before {
            crate::state_file::keep_newest(&mut stored.first_seen, MAX_ENTRIES);
            if let Err(e) = crate::state_file::write(path, &stored) {
                tracing::warn!(path = %path.display(), "first sightings not kept: {e}");
            }
        }
        seen
    }
}

impl FirstSeen {
    /// When `subject` was first seen, if it was: read only, nothing is recorded (the delivery
    /// report's start of a lead time when the registry gives no build time).
    pub fn get(&self, subject: &Subject) -> Option<i64> {
        let memory = memory().lock().unwrap_or_else(|p| p.into_inner());
        match &self.path {
            Some(path) => read(path).first_seen.get(&key(subject)).copied(),
            None => memory.get(&key(subject)).copied(),
        }
    }
}

/// Each subject's first sighting in `known`, `now` for new ones (recorded).
fn sightings(
    known: &mut BTreeMap<String, i64>,
    subjects: &[Subject],
    now: i64,
) -> BTreeMap<Subject, i64> {
    subjects
        .iter()
        .map(|s| (s.clone(), *known.entry(key(s)).or_insert(now)))
        .collect()
}

/// The file's sightings; none when it is missing, unreadable or not what tagpin writes.
fn read(path: &Path) -> Stored {
    crate::state_file::read(path, "first sightings", MAX_FILE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(n: u8) -> Subject {
        Subject {
            image: "ghcr.io/acme/web".into(),
            digest: format!("sha256:{}", format!("{n:02x}").repeat(32)),
        }
    }

    #[test]
    fn a_first_sighting_is_kept_across_stores_of_the_same_directory() {
        let dir = tempfile::tempdir().unwrap();
        let seen = FirstSeen::in_dir(dir.path()).record(&[subject(1)], 100);
        assert_eq!(seen[&subject(1)], 100);
        // Another process, later: the first sighting stands, a new digest is recorded now.
        let again = FirstSeen::in_dir(dir.path()).record(&[subject(1), subject(2)], 500);
        assert_eq!((again[&subject(1)], again[&subject(2)]), (100, 500));
        assert!(dir.path().join(FILE_NAME).is_file());
    }

    #[test]
    fn a_file_that_cannot_be_read_counts_as_empty_and_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "{not json").unwrap();
        let seen = FirstSeen::in_dir(dir.path()).record(&[subject(3)], 700);
        assert_eq!(seen[&subject(3)], 700);
        let kept = FirstSeen::in_dir(dir.path()).record(&[subject(3)], 900);
        assert_eq!(kept[&subject(3)], 700);
    }

    #[test]
    fn past_the_limit_the_oldest_are_forgotten() {
        let mut known: BTreeMap<String, i64> = (0..MAX_ENTRIES as i64 + 5)
            .map(|i| (format!("x{i}"), i))
            .collect();
        crate::state_file::keep_newest(&mut known, MAX_ENTRIES);
        assert_eq!(known.len(), MAX_ENTRIES);
        assert!(!known.contains_key("x4") && known.contains_key("x5"));
    }
}
