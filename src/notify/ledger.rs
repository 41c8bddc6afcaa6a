//! Which messages were delivered, so that each event is told once: kept in
//! `tagpin-notified.json` in the repository's cache directory (beside the mirror, as
//! `tagpin-first-seen.json` is), so a restart does not tell again what the last process told.
//!
//! Each entry is a target and an event's id ([`crate::event::Event::id`]) with when it was
//! last seen. A message being delivered is claimed in memory, so a pass that sees the event
//! again meanwhile does not send it twice; a delivery that fails releases it, to be tried
//! again if the event is seen again. Entries not seen for [`MAX_AGE_SECONDS`] are forgotten,
//! and past [`MAX_ENTRIES`] the oldest: a hold that lasts is seen at every pass and stays
//! remembered. The file is replaced atomically (written beside it, then renamed); one that
//! cannot be read counts as empty, and is logged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::mutex::lock;

/// The file's name in the cache directory.
pub const FILE_NAME: &str = "tagpin-notified.json";

/// Entries kept at most.
pub const MAX_ENTRIES: usize = 10_000;

/// How long an entry is kept after the event was last seen: 30 days.
pub const MAX_AGE_SECONDS: i64 = 30 * 24 * 3600;

/// An entry's sighting is written again only when older than this, so an event seen at every
/// pass does not rewrite the file at every pass.
const REFRESH_SECONDS: i64 = 24 * 3600;

/// The largest file read back.
const MAX_FILE_BYTES: u64 = 4 << 20;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    /// `<target>/<event id>` → Unix seconds it was last seen.
    #[serde(default)]
    notified: BTreeMap<String, i64>,
}

/// The messages delivered for one cache directory, and those being delivered.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Read from the file the first time it is needed.
    stored: Option<Stored>,
    claimed: BTreeSet<String>,
}

impl Ledger {
    /// The ledger kept in `cache_dir`.
    pub fn in_dir(cache_dir: &Path) -> Ledger {
        Ledger {
            path: cache_dir.join(FILE_NAME),
            state: Mutex::default(),
        }
    }

    /// Claims each of `keys` not yet delivered nor being delivered, and returns them; the
    /// others are noted as seen at `now`.
    pub fn claim(&self, keys: Vec<String>, now: i64) -> Vec<String> {
        let mut state = lock(&self.state);
        let State { stored, claimed } = &mut *state;
        let stored = stored.get_or_insert_with(|| read(&self.path));
        let mut refreshed = false;
        let mut fresh = Vec::new();
        for key in keys {
            if let Some(seen) = stored.notified.get_mut(&key) {
                if now - *seen > REFRESH_SECONDS {
                    *seen = now;
                    refreshed = true;
                }
            } else if claimed.insert(key.clone()) {
                fresh.push(key);
            }
        }
        if refreshed {
            self.save(stored, now);
        }
        fresh
    }

    /// `key` was delivered at `now`: kept, and the file written.
    pub fn delivered(&self, key: &str, now: i64) {
        let mut state = lock(&self.state);
        let State { stored, claimed } = &mut *state;
        claimed.remove(key);
        let stored = stored.get_or_insert_with(|| read(&self.path));
        stored.notified.insert(key.to_string(), now);
        self.save(stored, now);
    }

    /// `key` could not be delivered: released, to be tried if its event is seen again.
    pub fn failed(&self, key: &str) {
        lock(&self.state).claimed.remove(key);
    }

    fn save(&self, stored: &mut Stored, now: i64) {
        forget_old(&mut stored.notified, now);
        if let Err(e) = crate::state_file::write(&self.path, stored) {
            tracing::warn!(path = %self.path.display(), "notifications sent not kept: {e}");
        }
    }
}

fn forget_old(notified: &mut BTreeMap<String, i64>, now: i64) {
    notified.retain(|_, seen| now - *seen <= MAX_AGE_SECONDS);
    crate::state_file::keep_newest(notified, MAX_ENTRIES);
}

fn read(path: &Path) -> Stored {
    crate::state_file::read(path, "notifications sent", MAX_FILE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivered_message_is_not_claimed_again_even_by_a_new_process() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::in_dir(dir.path());
        assert_eq!(
            ledger.claim(vec!["a/1".into(), "a/2".into()], 100),
            ["a/1", "a/2"]
        );
        // Being delivered: not claimed twice.
        assert!(ledger.claim(vec!["a/1".into()], 101).is_empty());
        ledger.delivered("a/1", 102);
        ledger.failed("a/2");
        // A failed one is tried again; a delivered one never.
        assert_eq!(ledger.claim(vec!["a/1".into(), "a/2".into()], 103), ["a/2"]);
        let restarted = Ledger::in_dir(dir.path());
        assert_eq!(
            restarted.claim(vec!["a/1".into(), "a/2".into()], 104),
            ["a/2"]
        );
    }

    #[test]
    fn entries_not_seen_for_thirty_days_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::in_dir(dir.path());
        ledger.claim(vec!["old".into(), "kept".into()], 0);
        ledger.delivered("old", 0);
        ledger.delivered("kept", 0);
        // `kept` is seen again after two days: its sighting is renewed.
        assert!(ledger.claim(vec!["kept".into()], 2 * 24 * 3600).is_empty());
        let later = MAX_AGE_SECONDS + 24 * 3600;
        ledger.claim(vec!["new".into()], later);
        ledger.delivered("new", later);
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert!(!text.contains("\"old\""), "{text}");
        assert!(
            text.contains("\"kept\"") && text.contains("\"new\""),
            "{text}"
        );
    }

    #[test]
    fn an_unreadable_file_counts_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "{not json").unwrap();
        assert_eq!(Ledger::in_dir(dir.path()).claim(vec!["x".into()], 1), ["x"]);
    }
}
