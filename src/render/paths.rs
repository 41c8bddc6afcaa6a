//! Where a path written in a kustomization leads, decided on its text alone.
//!
//! kustomize resolves `resources:`, `components:` and patch paths against the kustomization's
//! directory, and fetches URLs and `host/org/repo` paths from the network. tagpin renders only
//! the repository's own files, read from a Git tree: a path must stay inside the repository
//! (no `..` past the root, no absolute path), and a remote one is reported, never fetched.
//! Paths are resolved lexically, which is sound because symlinks are never followed.

use std::path::{Component, Path, PathBuf};

/// Where an entry of a kustomization leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Resolved {
    /// A path in the repository, relative to its root, without `.` or `..`.
    Local(PathBuf),
    /// A URL (`https://…`, `git@…`, `ssh://…`): kustomize would fetch it.
    Remote,
    /// An absolute path, or one that climbs above the repository's root.
    Outside,
}

/// Resolves `entry`, as written in a kustomization in directory `dir` (relative to the root).
pub(super) fn resolve(dir: &Path, entry: &str) -> Resolved {
    if entry.contains("://") || entry.starts_with("git@") {
        return Resolved::Remote;
    }
    let mut resolved = PathBuf::new();
    for component in dir.join(entry).components() {
        match component {
            Component::Normal(part) => resolved.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !resolved.pop() {
                    return Resolved::Outside;
                }
            }
            Component::RootDir | Component::Prefix(_) => return Resolved::Outside,
        }
    }
    Resolved::Local(resolved)
}

/// Whether an entry the repository does not hold names a remote repository the way kustomize
/// accepts one without a scheme: `github.com/org/repo//dir?ref=v1`. kustomize tries the local
/// path first, so only a missing path is asked about.
pub(super) fn looks_remote(entry: &str) -> bool {
    let host = entry.split('/').next().unwrap_or("");
    let host_like = host.contains('.') && host != "." && host != ".." && entry.contains('/');
    host_like || entry.contains("?ref=") || entry.contains("//")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_against_the_kustomization_directory() {
        assert_eq!(
            resolve(Path::new("overlays/prod"), "../../base"),
            Resolved::Local(PathBuf::from("base"))
        );
        assert_eq!(
            resolve(Path::new("apps"), "./web/deployment.yaml"),
            Resolved::Local(PathBuf::from("apps/web/deployment.yaml"))
        );
        assert_eq!(
            resolve(Path::new(""), "deployment.yaml"),
            Resolved::Local(PathBuf::from("deployment.yaml"))
        );
    }

    #[test]
    fn paths_leaving_the_repository_are_outside() {
        assert_eq!(
            resolve(Path::new("overlays/prod"), "../../../base"),
            Resolved::Outside
        );
        assert_eq!(resolve(Path::new("a"), "/etc/passwd"), Resolved::Outside);
        // Down and up again, but never above the root, stays inside.
        assert_eq!(
            resolve(Path::new("a"), "b/../../c"),
            Resolved::Local(PathBuf::from("c"))
        );
    }

    #[test]
    fn urls_are_remote() {
        for entry in [
            "https://github.com/acme/base?ref=v1",
            "git@github.com:acme/base.git",
            "ssh://git@example.com/acme/base.git",
        ] {
            assert_eq!(resolve(Path::new("o"), entry), Resolved::Remote, "{entry}");
        }
    }

    #[test]
    fn host_paths_look_remote_and_plain_paths_do_not() {
        assert!(looks_remote("github.com/acme/platform//base?ref=v1"));
        assert!(looks_remote("gitlab.example.com/acme/base"));
        assert!(!looks_remote("../base"));
        assert!(!looks_remote("deployment.yaml"));
        assert!(!looks_remote("./base"));
    }
}
