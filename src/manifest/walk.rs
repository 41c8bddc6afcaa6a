//! Listing manifest files, reading them within limits, and writing results atomically.
//!
//! This is the file-system edge of the manifest module: scanning and rewriting stay pure, and
//! everything that can block, race or fail for reasons outside the file's contents lives here.
//! Symlinks are never followed: in a Git repository they can point anywhere on the machine
//! (a hostile repository could aim one at `/etc` or at a secret), so they are reported instead.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use walkdir::{DirEntry, WalkDir};

use super::error::{ManifestError, MAX_FILE_BYTES};

/// Which files of a directory tree are manifests. Patterns are globs relative to the
/// directory given to [`walk`]; `*` stays within one path component, `**` crosses them.
#[derive(Debug, Clone)]
pub struct FileFilter {
    include: GlobSet,
    exclude: GlobSet,
}

impl FileFilter {
    /// YAML and JSON files, and kustomize's extension-less `Kustomization` file.
    pub const DEFAULT_INCLUDE: [&'static str; 4] =
        ["**/*.yaml", "**/*.yml", "**/*.json", "**/Kustomization"];

    /// A filter taking files matching any `include` pattern and no `exclude` pattern.
    pub fn new(
        include: &[impl AsRef<str>],
        exclude: &[impl AsRef<str>],
    ) -> Result<Self, ManifestError> {
        Ok(FileFilter {
            include: glob_set(include)?,
            exclude: glob_set(exclude)?,
        })
    }

    /// The user's include globs, or [`FileFilter::DEFAULT_INCLUDE`] when they gave none: what
    /// the CLI's `--include` and the configuration's `include:` both mean.
    pub fn with_default_include(
        include: &[String],
        exclude: &[String],
    ) -> Result<Self, ManifestError> {
        if include.is_empty() {
            FileFilter::new(&Self::DEFAULT_INCLUDE, exclude)
        } else {
            FileFilter::new(include, exclude)
        }
    }

    /// Whether the file at `relative` (to the walked directory) is a manifest to scan.
    pub fn matches(&self, relative: &Path) -> bool {
        self.include.is_match(relative) && !self.exclude.is_match(relative)
    }

    fn excludes(&self, relative: &Path) -> bool {
        self.exclude.is_match(relative)
    }
}

impl Default for FileFilter {
    fn default() -> Self {
        let include = glob_set(&Self::DEFAULT_INCLUDE).unwrap_or_else(|_| GlobSet::empty());
        FileFilter {
            include,
            exclude: GlobSet::empty(),
        }
    }
}

fn glob_set(patterns: &[impl AsRef<str>]) -> Result<GlobSet, ManifestError> {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        let pattern = pattern.as_ref();
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|error| ManifestError::InvalidGlob {
                glob: pattern.to_string(),
                message: error.kind().to_string(),
            })?;
        builder.add(glob);
    }
    builder.build().map_err(|error| ManifestError::InvalidGlob {
        glob: patterns
            .iter()
            .map(|p| p.as_ref())
            .collect::<Vec<_>>()
            .join(", "),
        message: error.to_string(),
    })
}

/// What [`walk`] found: manifest files to scan, entries it would not read, and failures.
#[derive(Debug, Default)]
pub struct Walk {
    /// Regular files, sorted, each once.
    pub files: Vec<PathBuf>,
    /// Sorted by path.
    pub skipped: Vec<SkippedPath>,
    /// Each a [`ManifestError::Io`] naming the path that failed.
    pub errors: Vec<ManifestError>,
}

/// A directory entry [`walk`] did not read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedPath {
    pub path: PathBuf,
    pub reason: WalkSkipReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WalkSkipReason {
    /// Symlinks are not followed (see the module documentation).
    Symlink,
    /// A FIFO, socket or device: reading one could block or never end.
    NotARegularFile,
}

impl std::fmt::Display for SkippedPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.reason {
            WalkSkipReason::Symlink => "symlink not followed",
            WalkSkipReason::NotARegularFile => "not a regular file",
        };
        write!(f, "{what}: {}", self.path.display())
    }
}

/// Lists the manifest files under `paths`.
///
/// A file argument is taken as it is, whatever the filter says. A directory is walked
/// recursively without following symlinks, skipping hidden directories (`.git` among them)
/// below it, and keeping the files `filter` accepts. Every symlink met is reported in
/// [`Walk::skipped`] (unless excluded), so manifests behind one are not silently missed.
pub fn walk(paths: &[PathBuf], filter: &FileFilter) -> Walk {
    let mut result = Walk::default();
    for path in paths {
        match fs::symlink_metadata(path) {
            Err(source) => result.errors.push(ManifestError::Io {
                path: path.clone(),
                source,
            }),
            Ok(metadata) if metadata.file_type().is_symlink() => {
                result.skipped.push(SkippedPath {
                    path: path.clone(),
                    reason: WalkSkipReason::Symlink,
                });
            }
            Ok(metadata) if metadata.is_file() => result.files.push(path.clone()),
            Ok(metadata) if metadata.is_dir() => walk_directory(path, filter, &mut result),
            Ok(_) => result.skipped.push(SkippedPath {
                path: path.clone(),
                reason: WalkSkipReason::NotARegularFile,
            }),
        }
    }
    result.files.sort();
    result.files.dedup();
    result.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    result.skipped.dedup();
    result
}

fn walk_directory(root: &Path, filter: &FileFilter, result: &mut Walk) {
    let relative = |entry: &DirEntry| -> PathBuf {
        entry
            .path()
            .strip_prefix(root)
            .unwrap_or(entry.path())
            .to_path_buf()
    };
    let entries = WalkDir::new(root)
        .follow_links(false)
        .follow_root_links(false)
        .sort_by(|a, b| name_of(a).cmp(name_of(b)))
        .into_iter()
        .filter_entry(|entry| {
            entry.depth() == 0
                || !(entry.file_type().is_dir()
                    && (is_hidden(entry) || filter.excludes(&relative(entry))))
        });
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) => {
                let path = error.path().unwrap_or(root).to_path_buf();
                let message = error.to_string();
                let source = error
                    .into_io_error()
                    .unwrap_or_else(|| io::Error::other(message));
                result.errors.push(ManifestError::Io { path, source });
                continue;
            }
        };
        let file_type = entry.file_type();
        let relative = relative(&entry);
        if file_type.is_dir() || filter.excludes(&relative) {
            continue;
        }
        if file_type.is_symlink() {
            result.skipped.push(SkippedPath {
                path: entry.into_path(),
                reason: WalkSkipReason::Symlink,
            });
        } else if filter.matches(&relative) {
            if file_type.is_file() {
                result.files.push(entry.into_path());
            } else {
                result.skipped.push(SkippedPath {
                    path: entry.into_path(),
                    reason: WalkSkipReason::NotARegularFile,
                });
            }
        }
    }
}

/// The entry's file name as bytes, for sorting a directory's entries the way
/// `WalkDir::sort_by_file_name` does. Sorted that way, each comparison parsed both paths'
/// components from the end (`Path::file_name`): 6.6 million instructions for the 2,000
/// manifests of `bench_plan`, a third of listing them. A directory's entries are its path, a
/// `/` and a name without one, so the bytes after the last `/` are the name.
#[cfg(unix)]
fn name_of(entry: &DirEntry) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    let path = entry.path().as_os_str().as_bytes();
    match memchr::memrchr(b'/', path) {
        Some(slash) => &path[slash + 1..],
        None => path,
    }
}

#[cfg(not(unix))]
fn name_of(entry: &DirEntry) -> &std::ffi::OsStr {
    entry.file_name()
}

fn is_hidden(entry: &DirEntry) -> bool {
    entry
        .file_name()
        .to_str()
        .is_some_and(|name| name.starts_with('.') && name != "." && name != "..")
}

/// Reads a manifest, refusing files over [`MAX_FILE_BYTES`] before reading them (and files
/// that grow past it while being read).
pub fn read_manifest(path: &Path) -> Result<Vec<u8>, ManifestError> {
    let io_error = |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    };
    let too_large = |size| ManifestError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit: MAX_FILE_BYTES,
    };
    let file = File::open(path).map_err(io_error)?;
    let size = file.metadata().map_err(io_error)?.len();
    if size > MAX_FILE_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Replaces the file at `path` with `bytes` so that a reader (or a crash) sees either the old
/// contents or the new, never a mix: a temporary file in the same directory (same file
/// system, so the rename is atomic) takes the original's permissions, is flushed to disk, then
/// renamed over the original; the directory is synced so the rename survives a power loss.
/// A new file gets the temporary file's private permissions (0600 on Unix). Refuses to replace
/// a symlink.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let existing = match fs::symlink_metadata(path) {
        Ok(metadata) => Some(metadata),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(error) => return Err(error),
    };
    if existing
        .as_ref()
        .is_some_and(|m| m.file_type().is_symlink())
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to replace symlink {}", path.display()),
        ));
    }
    let mut temporary = tempfile::Builder::new()
        .prefix(".tagpin-")
        .suffix(".tmp")
        .tempfile_in(directory)?;
    temporary.write_all(bytes)?;
    if let Some(metadata) = existing {
        temporary
            .as_file()
            .set_permissions(metadata.permissions())?;
    }
    temporary.as_file().sync_all()?;
    temporary.persist(path).map_err(|error| error.error)?;
    File::open(directory)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for file in files {
            let path = dir.path().join(file);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(&path, "a: 1\n").expect("write");
        }
        dir
    }

    fn relative(dir: &Path, paths: &[PathBuf]) -> Vec<String> {
        paths
            .iter()
            .map(|p| {
                p.strip_prefix(dir)
                    .expect("under dir")
                    .display()
                    .to_string()
            })
            .collect()
    }

    fn walk_dir(dir: &Path, filter: &FileFilter) -> Walk {
        walk(&[dir.to_path_buf()], filter)
    }

    #[test]
    fn directories_yield_yaml_yml_json_and_kustomization_files_sorted() {
        let dir = tree(&[
            "b.yaml",
            "a/z.yml",
            "a/y.json",
            "c/Kustomization",
            "notes.md",
            "x.yaml.bak",
        ]);
        let found = walk_dir(dir.path(), &FileFilter::default());
        assert_eq!(
            relative(dir.path(), &found.files),
            ["a/y.json", "a/z.yml", "b.yaml", "c/Kustomization"]
        );
        assert!(found.skipped.is_empty() && found.errors.is_empty());
    }

    #[test]
    fn hidden_directories_are_skipped_below_the_root() {
        let dir = tree(&[
            ".git/config.yaml",
            ".github/workflows/ci.yaml",
            "app/.hidden/x.yaml",
            "app/.dotfile.yaml",
            "app/d.yaml",
        ]);
        let found = walk_dir(&dir.path().join("app"), &FileFilter::default());
        assert_eq!(
            relative(&dir.path().join("app"), &found.files),
            [".dotfile.yaml", "d.yaml"]
        );
        let found = walk_dir(dir.path(), &FileFilter::default());
        assert_eq!(
            relative(dir.path(), &found.files),
            ["app/.dotfile.yaml", "app/d.yaml"]
        );
    }

    #[test]
    fn a_hidden_directory_given_as_argument_is_walked() {
        let dir = tree(&[".deploy/x.yaml"]);
        let found = walk_dir(&dir.path().join(".deploy"), &FileFilter::default());
        assert_eq!(found.files.len(), 1);
    }

    #[test]
    fn symlinks_are_reported_and_not_followed() {
        let dir = tree(&["real/a.yaml", "outside/secret.yaml"]);
        symlink(
            dir.path().join("real/a.yaml"),
            dir.path().join("real/link.yaml"),
        )
        .expect("symlink");
        symlink(
            dir.path().join("outside"),
            dir.path().join("real/linked-dir"),
        )
        .expect("symlink");
        let found = walk_dir(&dir.path().join("real"), &FileFilter::default());
        assert_eq!(relative(&dir.path().join("real"), &found.files), ["a.yaml"]);
        let skipped: Vec<String> = found.skipped.iter().map(ToString::to_string).collect();
        let real = dir.path().join("real");
        assert_eq!(
            skipped,
            [
                format!("symlink not followed: {}", real.join("link.yaml").display()),
                format!(
                    "symlink not followed: {}",
                    real.join("linked-dir").display()
                ),
            ]
        );
    }

    #[test]
    fn a_symlink_given_as_argument_is_reported_and_not_followed() {
        let dir = tree(&["real/a.yaml"]);
        symlink(dir.path().join("real"), dir.path().join("link")).expect("symlink");
        let found = walk(&[dir.path().join("link")], &FileFilter::default());
        assert!(found.files.is_empty());
        assert_eq!(found.skipped[0].reason, WalkSkipReason::Symlink);
    }

    #[test]
    fn a_file_argument_is_taken_whatever_the_filter() {
        let dir = tree(&["notes.txt"]);
        let found = walk(&[dir.path().join("notes.txt")], &FileFilter::default());
        assert_eq!(found.files, [dir.path().join("notes.txt")]);
    }

    #[test]
    fn globs_are_relative_to_the_directory_argument() {
        let dir = tree(&[
            "apps/web/a.yaml",
            "apps/web/charts/b.yaml",
            "apps/db/c.yaml",
        ]);
        let filter = FileFilter::new(&["web/**/*.yaml"], &["**/charts/**"]).expect("globs");
        let found = walk_dir(&dir.path().join("apps"), &filter);
        assert_eq!(
            relative(&dir.path().join("apps"), &found.files),
            ["web/a.yaml"]
        );
    }

    #[test]
    fn a_single_star_does_not_cross_directories() {
        let dir = tree(&["a.yaml", "sub/b.yaml"]);
        let filter = FileFilter::new(&["*.yaml"], &[] as &[&str]).expect("globs");
        let found = walk_dir(dir.path(), &filter);
        assert_eq!(relative(dir.path(), &found.files), ["a.yaml"]);
    }

    #[test]
    fn overlapping_arguments_list_each_file_once() {
        let dir = tree(&["a.yaml"]);
        let found = walk(
            &[dir.path().to_path_buf(), dir.path().join("a.yaml")],
            &FileFilter::default(),
        );
        assert_eq!(found.files, [dir.path().join("a.yaml")]);
    }

    #[test]
    fn a_missing_path_is_an_error_naming_it() {
        let dir = tree(&[]);
        let missing = dir.path().join("nope");
        let found = walk(std::slice::from_ref(&missing), &FileFilter::default());
        assert_eq!(found.errors.len(), 1);
        assert!(found.errors[0]
            .to_string()
            .starts_with(&format!("{}: ", missing.display())));
    }

    #[test]
    fn an_invalid_glob_is_an_error_naming_it() {
        let error = FileFilter::new(&["a/[b"], &[] as &[&str]).unwrap_err();
        assert!(
            error.to_string().starts_with("invalid glob \"a/[b\": "),
            "{error}"
        );
    }

    #[test]
    fn read_manifest_refuses_a_file_over_the_limit_without_reading_it() {
        let dir = tree(&[]);
        let path = dir.path().join("big.yaml");
        let file = File::create(&path).expect("create");
        file.set_len(MAX_FILE_BYTES + 1).expect("sparse file");
        let error = read_manifest(&path).unwrap_err();
        assert!(
            matches!(error, ManifestError::TooLarge { size, .. } if size == MAX_FILE_BYTES + 1)
        );
    }

    #[test]
    fn read_manifest_returns_the_bytes() {
        let dir = tree(&["a.yaml"]);
        assert_eq!(
            read_manifest(&dir.path().join("a.yaml")).ok(),
            Some(b"a: 1\n".to_vec())
        );
    }

    #[test]
    fn write_atomic_replaces_the_contents_and_keeps_permissions() {
        let dir = tree(&["a.yaml"]);
        let path = dir.path().join("a.yaml");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
        write_atomic(&path, b"b: 2\n").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"b: 2\n");
        let mode = fs::metadata(&path).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[test]
    fn write_atomic_leaves_no_temporary_file() {
        let dir = tree(&["a.yaml"]);
        write_atomic(&dir.path().join("a.yaml"), b"b: 2\n").expect("write");
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["a.yaml"]);
    }

    #[test]
    fn write_atomic_creates_a_missing_file() {
        let dir = tree(&[]);
        write_atomic(&dir.path().join("new.yaml"), b"x").expect("write");
        assert_eq!(fs::read(dir.path().join("new.yaml")).expect("read"), b"x");
    }

    #[test]
    fn write_atomic_refuses_to_replace_a_symlink() {
        let dir = tree(&["target.yaml"]);
        let link = dir.path().join("link.yaml");
        symlink(dir.path().join("target.yaml"), &link).expect("symlink");
        let error = write_atomic(&link, b"x").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            fs::read(dir.path().join("target.yaml")).expect("read"),
            b"a: 1\n"
        );
    }
}
