//! The small JSON files tagpin keeps in a repository's cache directory (first sightings of a
//! digest, soak sightings, notifications sent): read with a size cap, started afresh when
//! missing or unreadable (each says what tagpin saw, never the only record of a decision), and
//! written atomically (a temporary file in the same directory, synced, then renamed), so a
//! crash or a second process sharing the cache leaves the old file or the new one, never half.
//! Maps of times are kept to their newest entries ([`keep_newest`]), so no file grows unbounded.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The file at `path`, or the default when it is missing, larger than `max_bytes`, or not
/// what tagpin writes (`what` names it in the warning).
pub fn read<T: DeserializeOwned + Default>(path: &Path, what: &str, max_bytes: u64) -> T {
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path).and_then(|file| {
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
    });
    let parsed = match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return T::default(),
        Err(e) => Err(e.to_string()),
        Ok(_) if bytes.len() as u64 > max_bytes => Err(format!("larger than {max_bytes} bytes")),
        Ok(_) => serde_json::from_slice(&bytes).map_err(|e| e.to_string()),
    };
    parsed.unwrap_or_else(|e| {
        tracing::warn!(path = %path.display(), "{what} unreadable, starting afresh: {e}");
        T::default()
    })
}

/// Writes `value` to `path` as JSON, atomically; the directory is made when missing.
pub fn write<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer(&mut file, value)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Past `max` entries of `times` (each key's Unix time), drops the oldest, keeping the `max`
/// newest (and any as new as the oldest of them), so the file they are written to stays bounded.
pub fn keep_newest(times: &mut BTreeMap<String, i64>, max: usize) {
    if times.len() <= max {
        return;
    }
    let mut sorted: Vec<i64> = times.values().copied().collect();
    sorted.sort_unstable();
    let cut = sorted[times.len() - max];
    times.retain(|_, at| *at >= cut);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_a_missing_damaged_or_oversized_file_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/state.json");
        let empty: BTreeMap<String, i64> = read(&path, "test state", 1024);
        assert!(empty.is_empty());
        let value = BTreeMap::from([("a".to_string(), 1_i64), ("b".to_string(), 2)]);
        write(&path, &value).unwrap();
        assert_eq!(
            read::<BTreeMap<String, i64>>(&path, "test state", 1024),
            value
        );
        assert!(read::<BTreeMap<String, i64>>(&path, "test state", 4).is_empty());
        std::fs::write(&path, "{not json").unwrap();
        assert!(read::<BTreeMap<String, i64>>(&path, "test state", 1024).is_empty());
        let leftovers = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
    }
}
