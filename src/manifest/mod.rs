//! Finding image fields in Kubernetes manifests and rewriting them byte-exactly.
//!
//! tagpin must change nothing in a manifest but the image value: re-serializing a YAML document
//! loses comments, quoting and indentation, which is the trap other image updaters fall into.
//! So the work is split up: `yaml` parses a file into a tree that keeps the exact byte range
//! of every value as written; [`kubernetes`] and [`kustomize`] walk that tree to where images
//! live; [`scan`] runs them over a file and records every image field it understands;
//! [`rewrite`] splices new values into those ranges and leaves every other byte alone; [`walk`]
//! is the only part that touches the file system (listing manifest files, writing results
//! atomically).

mod field;
pub mod helm;
mod helm_objects;
mod helm_text;
mod helm_values;
pub mod kubernetes;
pub mod kustomize;
pub mod rewrite;
pub mod scan;
mod simple_yaml;
pub mod walk;
pub(crate) mod yaml;

use std::ops::Range;
use std::path::PathBuf;

pub use field::{ContainerList, ImageField, Origin, ScalarStyle, SkipReason, SkippedField, Target};
pub use helm::{DigestMode, HelmImage, HelmOptions, HelmPart, HelmSource, HelmWrite};
pub use kustomize::KustomizeNamespaces;
pub use rewrite::{apply, render_scalar, Edit};
pub use scan::{scan, scan_with_options, ScanOutcome};
pub use walk::{read_manifest, walk, write_atomic, FileFilter, SkippedPath, Walk, WalkSkipReason};

/// Files larger than this are refused before parsing: no manifest is this big, and the parser
/// holds the whole file (plus a node per YAML value) in memory.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Collections nested deeper than this are refused. Real manifests stay well under 40 levels;
/// the limit keeps a hostile file from costing unbounded memory or time.
pub const MAX_DEPTH: usize = 100;

/// Everything that can go wrong while scanning, rewriting or listing manifests. Each message
/// names the file (and line and column where there is one) so a report can be acted upon.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The parser rejected the file, or the file uses YAML that cannot be located safely.
    #[error("{}:{line}:{column}: invalid YAML: {message}", path.display())]
    InvalidYaml {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// The file exceeds [`MAX_FILE_BYTES`]; it was not parsed.
    #[error("{}: file is {size} bytes, larger than the {limit}-byte limit", path.display())]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    /// The file nests collections deeper than [`MAX_DEPTH`].
    #[error("{}:{line}:{column}: nesting deeper than {limit} levels", path.display())]
    TooDeep {
        path: PathBuf,
        line: usize,
        column: usize,
        limit: usize,
    },
    /// YAML files must be UTF-8; `byte` is the offset of the first invalid byte.
    #[error("{}: not valid UTF-8 (byte {byte})", path.display())]
    NotUtf8 { path: PathBuf, byte: usize },
    /// Two edits touch the same bytes: applying both would corrupt the file.
    #[error("edits overlap: bytes {}..{} and {}..{}", first.start, first.end, second.start, second.end)]
    OverlappingEdits {
        first: Range<usize>,
        second: Range<usize>,
    },
    /// An edit does not fit the source it is applied to (the file changed since it was scanned).
    #[error("edit at bytes {}..{} does not fit the source: {reason}", span.start, span.end)]
    EditMismatch { span: Range<usize>, reason: String },
    /// An include or exclude pattern is not a valid glob.
    #[error("invalid glob {glob:?}: {message}")]
    InvalidGlob { glob: String, message: String },
    /// Reading a file or listing a directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The error of [`scan()`], under the name callers expect.
pub type ScanError = ManifestError;
/// The error of [`apply()`], under the name callers expect.
pub type RewriteError = ManifestError;
