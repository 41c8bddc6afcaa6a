//! Why a render is incomplete: each [`Unverifiable`] names a kustomization entry tagpin cannot
//! follow without kustomize fetching or running something, and where it is written. Apart from
//! the renderer (`super`) so that the kustomization reader can record them without importing
//! the renderer that imports it.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why a kustomization cannot be rendered by tagpin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Gap {
    /// A URL or a `host/org/repo` path: kustomize would fetch it.
    Remote,
    /// `helmCharts:`: Helm renders it.
    HelmChart,
    /// `generators:` or `transformers:`: a plugin can change anything.
    Plugin,
    /// A patch or replacement that may change an image, the containers or a name.
    Patch,
    /// An absolute path, or `..` above the repository's root.
    OutsideRepository,
    /// A symlink: never followed.
    Symlink,
    /// A path the repository does not hold, or a directory without a kustomization.
    Missing,
    /// A kustomization that includes itself.
    Cycle,
    /// Kustomizations nested deeper than [`super::MAX_NESTING`], or included more than
    /// [`super::MAX_INCLUDES`] times.
    TooLarge,
    /// Something kustomize refuses: a component listed as a resource, two kustomization files.
    Invalid,
    /// A file that is not valid YAML, not UTF-8, too large, or not a kustomization.
    Unreadable,
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Gap::Remote => "remote resource",
            Gap::HelmChart => "Helm chart",
            Gap::Plugin => "generator or transformer plugin",
            Gap::Patch => "patch or replacement that may change an image or a name",
            Gap::OutsideRepository => "path outside the repository",
            Gap::Symlink => "symlink",
            Gap::Missing => "missing file or directory",
            Gap::Cycle => "kustomization that includes itself",
            Gap::TooLarge => "kustomizations nested too deep or included too often",
            Gap::Invalid => "something kustomize refuses",
            Gap::Unreadable => "unreadable file",
        })
    }
}

/// A reason a kustomization's render is incomplete, where it is written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unverifiable {
    /// The kustomization holding the entry (or, for a root that cannot be read, the root).
    pub path: PathBuf,
    pub line: usize,
    pub column: usize,
    pub gap: Gap,
    /// What exactly, for people: the entry and what is wrong with it.
    pub detail: String,
}

impl Unverifiable {
    pub(super) fn new(
        path: &Path,
        (line, column): (usize, usize),
        gap: Gap,
        detail: String,
    ) -> Unverifiable {
        Unverifiable {
            path: path.to_path_buf(),
            line,
            column,
            gap,
            detail,
        }
    }
}

impl fmt::Display for Unverifiable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.path.display(),
            self.line,
            self.column,
            self.detail
        )
    }
}
