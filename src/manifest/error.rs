//! What can go wrong in manifest work, and the limits that refuse hostile files: the children
//! of `manifest` all use these, so they live apart from `manifest/mod.rs`, which uses the
//! children.

use std::ops::Range;
use std::path::PathBuf;

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
