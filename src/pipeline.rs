//! The one path from a set of files to what the planner and the verifier read.
//!
//! `pin`, `plan`, `sync`, `verify` and the golden tests all gather files (from the working
//! tree, [`gather_working_tree`], or from a commit, [`crate::git::Mirror::read_files`]) and
//! hand them to [`scan`]. It used to be written four times, and the copies drifted: one dropped
//! scan errors, one forgot kustomization namespaces, one grouped images differently. Now every
//! command sees the same files, namespaces, skip reasons and errors for the same tree.
//!
//! Nothing here fails as a whole: a file that cannot be read or parsed is an error of that file,
//! listed with file, line and column, and every other file is still scanned.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Serialize;

use crate::config;
use crate::manifest::{self, FileFilter, HelmSource, ImageField, KustomizeNamespaces};
use crate::manifest::{ManifestError, Origin};
use crate::manifest::{SkipReason, WalkSkipReason};
use crate::plan::ScannedFile;
use crate::reference::Reference;
use crate::render::Gap;

/// One file to scan: its path as messages show it, and its bytes.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// The files of one tree, before scanning: what was read, passed over, or failed.
#[derive(Debug, Default)]
pub struct Gathered {
    pub files: Vec<SourceFile>,
    pub skipped: Vec<Skipped>,
    pub errors: Vec<ManifestError>,
}

/// Why a file or a field was passed over on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipWhy {
    /// Symlinks are never followed: they can point anywhere on the machine.
    Symlink,
    /// A FIFO, socket or device.
    NotARegularFile,
    /// A Git submodule: another repository.
    Submodule,
    /// No document in the file has `apiVersion` and `kind`, and it is no kustomization.
    NotKubernetes,
    /// An image field tagpin will not touch.
    Field(SkipReason),
    /// The configuration's `images.manage` or `images.ignore` leaves this image out.
    NotManaged,
    /// `tagpin verify` cannot render this part of a kustomization (see [`crate::render`]).
    NotRendered(Gap),
}

impl fmt::Display for SkipWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipWhy::Symlink => f.write_str("symlink not followed"),
            SkipWhy::NotARegularFile => f.write_str("not a regular file"),
            SkipWhy::Submodule => f.write_str("submodule not followed"),
            SkipWhy::NotKubernetes => f.write_str("not a Kubernetes manifest"),
            SkipWhy::Field(reason) => write!(f, "image field left alone: {reason}"),
            SkipWhy::NotManaged => {
                f.write_str("image left alone: not selected by images.manage / images.ignore")
            }
            SkipWhy::NotRendered(gap) => write!(f, "kustomization not rendered: {gap}"),
        }
    }
}

/// A file, or a field of a file, passed over on purpose.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Skipped {
    pub path: PathBuf,
    /// 1-based line and column of a skipped field.
    pub position: Option<(usize, usize)>,
    pub why: SkipWhy,
}

impl Skipped {
    pub fn file(path: impl Into<PathBuf>, why: SkipWhy) -> Skipped {
        Skipped {
            path: path.into(),
            position: None,
            why,
        }
    }
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => {
                write!(f, "{}:{line}:{column}: {}", self.path.display(), self.why)
            }
            None => write!(f, "{}: {}", self.path.display(), self.why),
        }
    }
}

/// Skips are reported as their message in `--output json`.
impl Serialize for Skipped {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What [`scan`] found in one tree.
#[derive(Debug, Default)]
pub struct Scanned {
    /// Files holding at least one image field tagpin manages, in path order, with every
    /// container's namespace filled from the nearest kustomization when the manifest names none.
    pub files: Vec<ScannedFile>,
    /// Files that were read (whether or not they hold images).
    pub files_read: usize,
    pub skipped: Vec<Skipped>,
    /// Kubernetes manifests (and kustomizations, and values files) read that hold no image
    /// field at all, in path order: read, and said so, never silently passed over.
    pub without_images: Vec<WithoutImages>,
    /// Files that could not be listed, read or parsed, each naming file (and line and column).
    pub errors: Vec<ManifestError>,
}

impl Scanned {
    /// Every managed image field of the tree.
    pub fn fields(&self) -> impl Iterator<Item = &ImageField> {
        self.files.iter().flat_map(|f| f.fields.iter())
    }

    /// How many managed image fields were found in objects of each kind, by the name
    /// [`kind_read`] gives it: what `plan` says it read.
    pub fn kinds(&self) -> BTreeMap<String, usize> {
        let mut kinds = BTreeMap::new();
        for field in self.fields() {
            *kinds.entry(kind_read(&field.origin)).or_insert(0) += 1;
        }
        kinds
    }
}

/// The kind of what holds an image field: the workload's kind (`Deployment`, `Rollout`, an
/// other kind with its group, `CloneSet.apps.kruise.io`), `Kustomization` for an `images:`
/// entry, and for Helm values what holds them (`Helm values`, `HelmRelease`, `Application`).
pub(crate) fn kind_read(origin: &Origin) -> String {
    match origin {
        Origin::Container { workload, .. } => workload.kind.to_string(),
        Origin::KustomizeImage { .. } => "Kustomization".to_string(),
        Origin::HelmImage(image) => match image.source {
            HelmSource::ValuesFile { .. } => "Helm values".to_string(),
            HelmSource::HelmRelease { .. } => "HelmRelease".to_string(),
            HelmSource::Application { .. } => "Application".to_string(),
        },
    }
}

/// A manifest read that holds no image: its path, and what it holds (its documents' kinds).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct WithoutImages {
    pub file: PathBuf,
    /// `Service`, `Rollout`, `Kustomization`, `Helm values`: in file order, once each.
    pub holds: Vec<String>,
}

/// `apps/svc.yaml (Service, ConfigMap)`.
impl fmt::Display for WithoutImages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.file.display(), self.holds.join(", "))
    }
}

/// Which images tagpin manages: the configuration's `images.manage` (empty: all) and
/// `images.ignore` patterns, matched as every image rule is
/// ([`crate::reference::pattern`]), compiled once.
#[derive(Debug, Clone, Default)]
pub struct ImageSelection {
    manage: Option<GlobSet>,
    ignore: GlobSet,
    /// Which files hold Helm values and how digests go into them (`helm:`).
    helm: manifest::HelmOptions,
}

impl ImageSelection {
    /// The selection of a configuration: `images.manage`/`images.ignore`, and `helm:`.
    pub(crate) fn for_config(config: &config::Config) -> Result<ImageSelection, ManifestError> {
        Ok(ImageSelection {
            helm: config.helm.options()?,
            ..ImageSelection::compile(&config.images)?
        })
    }

    pub fn compile(rules: &config::ImageRules) -> Result<ImageSelection, ManifestError> {
        let set = |globs: &[String]| {
            let mut builder = GlobSetBuilder::new();
            for g in globs {
                let glob = crate::reference::pattern::normalize(g);
                builder.add(Glob::new(&glob).map_err(|e| ManifestError::InvalidGlob {
                    glob: g.clone(),
                    message: e.kind().to_string(),
                })?);
            }
            builder.build().map_err(|e| ManifestError::InvalidGlob {
                glob: globs.join(", "),
                message: e.to_string(),
            })
        };
        Ok(ImageSelection {
            manage: if rules.manage.is_empty() {
                None
            } else {
                Some(set(&rules.manage)?)
            },
            ignore: set(&rules.ignore)?,
            helm: manifest::HelmOptions::default(),
        })
    }

    /// Whether tagpin manages this image. Values that do not parse stay in, so the planner
    /// reports them with file and line.
    pub fn manages(&self, value: &str) -> bool {
        // Without rules (`plan`, `pin`, a configuration without `images:`) every image is
        // managed: nothing to parse (a parse per field was about 3 % of a `plan`'s CPU).
        if self.manage.is_none() && self.ignore.is_empty() {
            return true;
        }
        let Ok(reference) = Reference::parse(value) else {
            return true;
        };
        let name = reference.canonical_name();
        self.manage.as_ref().is_none_or(|m| m.is_match(&name)) && !self.ignore.is_match(&name)
    }
}

/// Lists and reads the manifest files under `paths` in the working tree. A path that does not
/// exist, a directory that cannot be listed and a file that cannot be read are errors naming
/// the path; the other files are still read.
pub fn gather_working_tree(paths: &[PathBuf], filter: &FileFilter) -> Gathered {
    let (listed, mut gathered) = list_working_tree(paths, filter);
    let mut read_errors = Vec::new();
    for path in listed {
        match manifest::read_manifest(&path) {
            Ok(bytes) => gathered.files.push(SourceFile { path, bytes }),
            Err(e) => read_errors.push(e),
        }
    }
    gathered.errors.extend(read_errors);
    gathered
}

/// The files under `paths` to read, and what the walk passed over or failed on (no files yet).
fn list_working_tree(paths: &[PathBuf], filter: &FileFilter) -> (Vec<PathBuf>, Gathered) {
    let listing = manifest::walk(paths, filter);
    let mut gathered = Gathered {
        errors: listing.errors,
        ..Gathered::default()
    };
    gathered
        .skipped
        .extend(listing.skipped.into_iter().map(|s| {
            let why = match s.reason {
                WalkSkipReason::Symlink => SkipWhy::Symlink,
                WalkSkipReason::NotARegularFile => SkipWhy::NotARegularFile,
            };
            Skipped::file(s.path, why)
        }));
    (listing.files, gathered)
}

/// Scans every gathered file as one tree: each kustomization's `namespace:` reaches the
/// manifests beside and below it, `selection` decides which images are managed, and every
/// problem is kept with its file, line and column.
pub fn scan(gathered: Gathered, selection: &ImageSelection) -> Scanned {
    scan_with(gathered, selection, |_| {})
}

/// [`scan`], handing each file with image fields to `found` as soon as it is scanned, so a
/// caller can start resolving its images while the rest is scanned.
pub fn scan_with(
    gathered: Gathered,
    selection: &ImageSelection,
    mut found: impl FnMut(&ScannedFile),
) -> Scanned {
    let Gathered {
        files,
        skipped,
        errors,
    } = gathered;
    let mut namespaces = KustomizeNamespaces::default();
    for file in &files {
        namespaces.add(&file.path, &file.bytes);
    }
    let mut scanned = Scanned {
        files_read: files.len(),
        ..Scanned::default()
    };
    let mut passed = Found {
        skipped,
        errors,
        ..Found::default()
    };
    for SourceFile { path, bytes } in files {
        if let Some(mut file) = scan_one(path, bytes, selection, &mut passed) {
            namespaces.fill(&file.path, &mut file.fields);
            found(&file);
            scanned.files.push(file);
        }
    }
    finish(scanned, passed)
}

/// Gathers and scans the working tree (what `plan` and `pin` run), reading each file just
/// before scanning it and handing each file with image fields to `found` at once: a caller can ask the registry about the first file's
/// images before the last file is read. `found` sees the fields before kustomization
/// namespaces are filled in (the kustomization may come later in the walk); the result has
/// them, and is exactly what gathering every file first and then scanning returns.
pub fn scan_working_tree_with(
    paths: &[PathBuf],
    filter: &FileFilter,
    selection: &ImageSelection,
    mut found: impl FnMut(&ScannedFile),
) -> Scanned {
    let (listed, listing) = list_working_tree(paths, filter);
    let Gathered {
        skipped,
        errors: listing_errors,
        ..
    } = listing;
    let mut read_errors = Vec::new();
    let mut passed = Found {
        skipped,
        ..Found::default()
    };
    let mut namespaces = KustomizeNamespaces::default();
    let mut scanned = Scanned::default();
    for path in listed {
        let bytes = match manifest::read_manifest(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                read_errors.push(e);
                continue;
            }
        };
        scanned.files_read += 1;
        namespaces.add(&path, &bytes);
        if let Some(file) = scan_one(path, bytes, selection, &mut passed) {
            found(&file);
            scanned.files.push(file);
        }
    }
    for file in &mut scanned.files {
        namespaces.fill(&file.path, &mut file.fields);
    }
    // In the order gathering them all first gives them: listing, reading, scanning.
    let mut errors = listing_errors;
    errors.extend(read_errors);
    errors.append(&mut passed.errors);
    passed.errors = errors;
    finish(scanned, passed)
}

/// Scans one file; the file if it holds image fields `selection` manages (namespaces not yet
/// filled). What it passes over goes to `skipped`, a file that cannot be parsed to `errors`.
fn scan_one(
    path: PathBuf,
    bytes: Vec<u8>,
    selection: &ImageSelection,
    found: &mut Found,
) -> Option<ScannedFile> {
    let Found {
        skipped,
        errors,
        without_images,
    } = found;
    let outcome = match manifest::scan_with_options(&path, &bytes, &selection.helm) {
        Ok(outcome) => outcome,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
    if outcome.kubernetes_documents == 0 {
        skipped.push(Skipped::file(&path, SkipWhy::NotKubernetes));
    } else if outcome.fields.is_empty() && outcome.skipped.is_empty() {
        without_images.push(WithoutImages {
            file: path.clone(),
            holds: outcome.holds.clone(),
        });
    }
    skipped.extend(outcome.skipped.iter().map(|field| Skipped {
        path: path.clone(),
        position: Some((field.line, field.column)),
        why: SkipWhy::Field(field.reason),
    }));
    let mut fields = Vec::with_capacity(outcome.fields.len());
    for field in outcome.fields {
        if selection.manages(&field.value) {
            fields.push(field);
        } else {
            skipped.push(Skipped {
                path: path.clone(),
                position: Some((field.line, field.column)),
                why: SkipWhy::NotManaged,
            });
        }
    }
    if fields.is_empty() {
        return None;
    }
    Some(ScannedFile {
        path,
        source: bytes,
        fields,
    })
}

/// What scanning files passes over, fails on, or finds without images, besides the files
/// with images.
#[derive(Default)]
struct Found {
    skipped: Vec<Skipped>,
    errors: Vec<ManifestError>,
    without_images: Vec<WithoutImages>,
}

/// Files in path order, skip reasons sorted and once each.
fn finish(mut scanned: Scanned, found: Found) -> Scanned {
    let Found {
        mut skipped,
        errors,
        mut without_images,
    } = found;
    scanned.files.sort_by(|a, b| a.path.cmp(&b.path));
    skipped.sort();
    skipped.dedup();
    without_images.sort();
    scanned.skipped = skipped;
    scanned.errors = errors;
    scanned.without_images = without_images;
    scanned
}

/// Gathers every file of the working tree, then scans: what the streaming scan
/// ([`scan_working_tree_with`]) is tested against.
#[cfg(test)]
fn scan_working_tree(
    paths: &[PathBuf],
    filter: &FileFilter,
    selection: &ImageSelection,
) -> Scanned {
    scan(gather_working_tree(paths, filter), selection)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn file(path: &str, text: &str) -> SourceFile {
        SourceFile {
            path: PathBuf::from(path),
            bytes: text.as_bytes().to_vec(),
        }
    }

    const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: app, image: 'nginx:1.27'}\n      - {name: side, image: 'ghcr.io/acme/side:1'}\n";

    /// The workload of each image field, in order; every field must be a container's.
    fn owners(scanned: &Scanned) -> Vec<String> {
        scanned
            .fields()
            .map(|f| match &f.origin {
                manifest::Origin::Container { workload, .. } => workload.to_string(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn gathered(files: Vec<SourceFile>) -> Gathered {
        Gathered {
            files,
            ..Gathered::default()
        }
    }

    #[test]
    fn a_broken_file_is_an_error_with_its_position_and_hides_no_other_file() {
        let scanned = scan(
            gathered(vec![
                file(
                    "apps/broken.yaml",
                    "apiVersion: v1\nkind: Pod\nspec:\n  a: [\n",
                ),
                file("apps/web.yaml", DEPLOYMENT),
            ]),
            &ImageSelection::default(),
        );
        assert_eq!(scanned.files.len(), 1);
        assert_eq!(scanned.files[0].path, Path::new("apps/web.yaml"));
        assert_eq!(scanned.errors.len(), 1);
        let message = scanned.errors[0].to_string();
        assert!(message.starts_with("apps/broken.yaml:"), "{message}");
        assert!(message.contains("invalid YAML"), "{message}");
        assert_eq!(scanned.files_read, 2);
    }

    #[test]
    fn kustomization_namespaces_reach_the_manifests_below_them() {
        let scanned = scan(
            gathered(vec![
                file(
                    "apps/kustomization.yaml",
                    "namespace: shop\nresources: [web.yaml]\n",
                ),
                file("apps/web.yaml", DEPLOYMENT),
            ]),
            &ImageSelection::default(),
        );
        assert_eq!(
            owners(&scanned),
            ["shop/Deployment/web", "shop/Deployment/web"]
        );
    }

    #[test]
    fn unmanaged_images_are_skipped_with_their_reason() {
        let selection = ImageSelection::compile(&config::ImageRules {
            manage: vec![],
            ignore: vec!["ghcr.io/acme/**".into()],
            ..config::ImageRules::default()
        })
        .unwrap();
        let scanned = scan(gathered(vec![file("web.yaml", DEPLOYMENT)]), &selection);
        let values: Vec<&str> = scanned.fields().map(|f| f.value.as_str()).collect();
        assert_eq!(values, ["nginx:1.27"]);
        assert_eq!(
            scanned.skipped[0].to_string(),
            "web.yaml:9:29: image left alone: not selected by images.manage / images.ignore"
        );
    }

    #[test]
    fn files_that_are_not_kubernetes_are_skipped_and_named() {
        let scanned = scan(
            gathered(vec![file("settings.yaml", "replicas: 3\nimage: nginx\n")]),
            &ImageSelection::default(),
        );
        assert!(scanned.files.is_empty() && scanned.errors.is_empty());
        assert_eq!(
            scanned.skipped[0].to_string(),
            "settings.yaml: not a Kubernetes manifest"
        );
    }

    #[test]
    fn helm_values_files_are_scanned_by_name_or_by_the_configured_globs() {
        let text = "replicas: 3\nimage: nginx:1.27\n";
        let files = || {
            gathered(vec![
                file("chart/values.yaml", text),
                file("envs/prod/overrides.yaml", text),
            ])
        };
        let scanned = scan(files(), &ImageSelection::default());
        let paths: Vec<&Path> = scanned.files.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(paths, [Path::new("chart/values.yaml")]);
        let config = config::Config::parse(
            "repository: {url: https://example.com/g.git}\nhelm: {values_files: [\"envs/*/overrides.yaml\"]}\n",
            Path::new("tagpin.yaml"),
        )
        .unwrap();
        let scanned = scan(files(), &ImageSelection::for_config(&config).unwrap());
        assert_eq!(scanned.files.len(), 2);
    }

    #[test]
    fn reading_while_scanning_gives_what_reading_first_gives_and_finds_images_early() {
        let dir = tempfile::tempdir().unwrap();
        let apps = dir.path().join("apps");
        std::fs::create_dir_all(apps.join("sub")).unwrap();
        // The manifest is walked before the kustomization that gives it its namespace.
        std::fs::write(apps.join("a-web.yaml"), DEPLOYMENT).unwrap();
        std::fs::write(
            apps.join("broken.yaml"),
            "apiVersion: v1\nkind: Pod\nspec: [\n",
        )
        .unwrap();
        std::fs::write(apps.join("kustomization.yaml"), "namespace: shop\n").unwrap();
        std::fs::write(apps.join("sub/settings.yaml"), "image: nginx\n").unwrap();
        std::fs::write(apps.join("sub/web.yaml"), DEPLOYMENT).unwrap();
        let paths = [dir.path().to_path_buf(), dir.path().join("missing")];
        let filter = FileFilter::default();
        let selection = ImageSelection::default();

        let mut found = Vec::new();
        let streamed = scan_working_tree_with(&paths, &filter, &selection, |file| {
            found.push(file.path.clone());
        });
        let read_first = scan_working_tree(&paths, &filter, &selection);

        assert_eq!(format!("{streamed:?}"), format!("{read_first:?}"));
        assert_eq!(streamed.files_read, 5);
        assert_eq!(streamed.errors.len(), 2, "{:?}", streamed.errors);
        assert_eq!(found, [apps.join("a-web.yaml"), apps.join("sub/web.yaml")]);
        assert_eq!(owners(&streamed), ["shop/Deployment/web"; 4]);
    }
}
