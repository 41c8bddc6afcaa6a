//! One pass over a tree of manifests: list, read, scan, resolve, plan; then, for `pin`, write.
//!
//! This is the I/O shell around the pure planner. Per-file problems (unreadable, not YAML, too
//! large) are collected and the pass goes on, the way ripgrep reports a bad file and keeps
//! searching: one broken manifest never blocks the pins of all the others.

use std::path::{Path, PathBuf};

use crate::manifest::{self, FileFilter};
use crate::plan::{self, FilePlan, Plan, ScannedFile};
use crate::registry::Client;

/// The outcome of one pass.
#[derive(Debug, Default)]
pub struct Pass {
    pub plan: Plan,
    /// Files that could not be read or scanned, with the reason (file and line).
    pub file_errors: Vec<String>,
    /// What was passed over on purpose, and why: symlinks, files that are not Kubernetes
    /// manifests, image fields tagpin cannot edit safely.
    pub skipped: Vec<String>,
}

impl Pass {
    /// Every failure of the pass, files first, then fields, as messages naming file and line.
    pub fn failures(&self) -> Vec<String> {
        self.file_errors
            .iter()
            .cloned()
            .chain(self.plan.problems.iter().map(|p| p.to_string()))
            .collect()
    }

    pub fn has_failures(&self) -> bool {
        !self.file_errors.is_empty() || !self.plan.problems.is_empty()
    }
}

/// Scans `paths`, resolves every distinct image once, and plans. Writes nothing.
pub async fn run(paths: &[PathBuf], filter: &FileFilter, client: &Client) -> Pass {
    let mut pass = Pass::default();
    let files = scan_paths(paths, filter, &mut pass);
    let references = plan::references_to_resolve(&files);
    let resolutions = client.resolve_all(references.iter()).await;
    pass.plan = plan::plan(&files, &resolutions);
    pass
}

/// Lists and scans the manifest files under `paths`. Files with no image field are dropped
/// (they have nothing to plan), so memory holds only the files that may change.
pub fn scan_paths(paths: &[PathBuf], filter: &FileFilter, pass: &mut Pass) -> Vec<ScannedFile> {
    let listing = manifest::walk(paths, filter);
    pass.skipped
        .extend(listing.skipped.iter().map(|s| s.to_string()));
    for error in &listing.errors {
        pass.file_errors.push(error.to_string());
    }
    let mut files = Vec::new();
    for path in listing.files {
        let source = match manifest::read_manifest(&path) {
            Ok(source) => source,
            Err(e) => {
                pass.file_errors.push(e.to_string());
                continue;
            }
        };
        match manifest::scan(&path, &source) {
            Ok(outcome) => {
                if outcome.kubernetes_documents == 0 {
                    pass.skipped
                        .push(format!("{}: not a Kubernetes manifest", path.display()));
                }
                for field in &outcome.skipped {
                    pass.skipped.push(format!(
                        "{}:{}:{}: image field left alone: {}",
                        path.display(),
                        field.line,
                        field.column,
                        field.reason
                    ));
                }
                if !outcome.fields.is_empty() {
                    files.push(ScannedFile {
                        path,
                        source,
                        fields: outcome.fields,
                    });
                }
            }
            Err(e) => pass.file_errors.push(e.to_string()),
        }
    }
    files
}

/// What happened to one planned file on `pin`.
#[derive(Debug)]
pub struct WriteOutcome {
    pub path: PathBuf,
    pub result: Result<(), String>,
}

/// Writes every planned file atomically. A file that changed on disk since it was read is
/// not overwritten: its edit spans were computed for the old bytes.
pub fn write(plan: &Plan) -> Vec<WriteOutcome> {
    plan.files
        .iter()
        .map(|file| WriteOutcome {
            path: file.path.clone(),
            result: write_one(file),
        })
        .collect()
}

fn write_one(file: &FilePlan) -> Result<(), String> {
    let current = std::fs::read(&file.path).map_err(|e| e.to_string())?;
    if current != file.original {
        return Err("the file changed while tagpin was planning; run again".to_string());
    }
    manifest::write_atomic(Path::new(&file.path), &file.updated).map_err(|e| e.to_string())
}
