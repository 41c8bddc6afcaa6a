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

mod error;
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

pub use error::{ManifestError, MAX_DEPTH, MAX_FILE_BYTES};
pub use field::{ContainerList, ImageField, Origin, ScalarStyle, SkipReason, SkippedField, Target};
pub use helm::{DigestMode, HelmImage, HelmOptions, HelmPart, HelmSource, HelmWrite};
pub use kustomize::KustomizeNamespaces;
pub use rewrite::{apply, render_scalar, Edit};
pub use scan::{scan, scan_with_options, ScanOutcome};
pub use walk::{read_manifest, walk, write_atomic, FileFilter, SkippedPath, Walk, WalkSkipReason};

/// The error of [`scan()`], under the name callers expect.
pub type ScanError = ManifestError;
/// The error of [`apply()`], under the name callers expect.
pub type RewriteError = ManifestError;
