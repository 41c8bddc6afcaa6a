//! Damage to tagpin's Git mirror in a cache directory, as an operator of `tagpin run` meets it
//! after a node crash, a full disk or an interrupted fetch: the remote is fine throughout, the
//! mirror is only a cache.
//!
//! Each damage is made the way the failure makes it, on the files of a real mirror that
//! earlier passes filled. Files are replaced by rename, never rewritten in place, so that a
//! process reading the mirror meanwhile (the operator reconciles on its own schedule) reads
//! either the old file or the damaged one: a pack truncated under libgit2's mapping of it
//! would kill that process with SIGBUS instead.

use std::path::{Path, PathBuf};

use super::git::{git_ok, BareRepo};

/// What is wrong with the mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// Every pack file cut to half its length (a disk that filled up, a copy interrupted).
    TruncatedPack,
    /// The loose object of `apps/web.yaml` at the remote's `main` removed (a crash before the
    /// object reached the disk): tagpin wrote it with its last pin.
    LooseObjectRemoved,
    /// `refs/remotes/origin/main` overwritten with garbage (a torn write).
    LooseRefGarbage,
    /// Every pack index removed: the packs are there, and libgit2 sees none of them.
    PackIndexRemoved,
    /// The mirror's `config` cut in the middle of a section header.
    BrokenConfig,
}

impl Damage {
    /// The damages the issue found failing every pass (and a missing pack index).
    pub const OBJECTS_AND_REFS: [Damage; 4] = [
        Damage::TruncatedPack,
        Damage::LooseObjectRemoved,
        Damage::LooseRefGarbage,
        Damage::PackIndexRemoved,
    ];
}

/// The one mirror (`mirror-*.git`) directly under `dir`.
pub fn mirror_in(dir: &Path) -> PathBuf {
    let mirrors: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "git"))
        .collect();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    mirrors[0].clone()
}

/// Where a repair moves a damaged mirror: `<mirror>.damaged`.
pub fn moved_aside(mirror: &Path) -> PathBuf {
    PathBuf::from(format!("{}.damaged", mirror.display()))
}

/// Damages `mirror`, a mirror of `remote`.
pub fn damage(mirror: &Path, remote: &BareRepo, how: Damage) {
    match how {
        Damage::TruncatedPack => {
            for pack in in_pack_dir(mirror, "pack") {
                let bytes = std::fs::read(&pack).unwrap();
                replace(&pack, &bytes[..bytes.len() / 2]);
            }
        }
        Damage::PackIndexRemoved => {
            for index in in_pack_dir(mirror, "idx") {
                std::fs::remove_file(&index).unwrap();
            }
        }
        Damage::LooseObjectRemoved => {
            let id = git_ok(remote.path(), &["rev-parse", "main:apps/web.yaml"]);
            let loose = mirror.join("objects").join(&id[..2]).join(&id[2..]);
            assert!(
                loose.is_file(),
                "{} is not a loose object of {}",
                id,
                mirror.display()
            );
            std::fs::remove_file(&loose).unwrap();
        }
        Damage::LooseRefGarbage => {
            let head = mirror.join("refs/remotes/origin/main");
            assert!(head.is_file(), "{} is not a loose ref", head.display());
            replace(&head, b"garbage\n");
        }
        Damage::BrokenConfig => replace(&mirror.join("config"), b"[core\n"),
    }
}

/// The files of `mirror`'s pack directory ending in `.ext` (at least one).
fn in_pack_dir(mirror: &Path, ext: &str) -> Vec<PathBuf> {
    let dir = mirror.join("objects/pack");
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    assert!(!found.is_empty(), "no .{ext} in {}", dir.display());
    found
}

/// Replaces `path` with `bytes` by rename.
fn replace(path: &Path, bytes: &[u8]) {
    let temporary = PathBuf::from(format!("{}.damage", path.display()));
    std::fs::write(&temporary, bytes).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}
