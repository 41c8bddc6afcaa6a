//! What a kustomization deploys, as kustomize builds it: which workload, in which namespace and
//! under which name, runs which image. Rendered by tagpin itself, without running kustomize.
//!
//! A GitOps tool applies an overlay, not the files under it: `overlays/prod` with
//! `namePrefix: prod-`, `namespace: prod` and an `images:` entry pinning `ghcr.io/acme/web` deploys
//! the base's `Deployment/web` as `prod/Deployment/prod-web`, running the entry's digest. The
//! verifier must look there, and nowhere else. This module follows what decides it:
//! `resources:` (files, and directories holding a kustomization), the legacy `bases:`, and
//! `components:`, recursively, with cycle detection and a nesting bound ([`MAX_NESTING`]);
//! `namespace:`, `namePrefix:` and `nameSuffix:` (an overlay's prefix goes in front of its
//! base's); and the `images:` transform ([`images`]). Components apply their transforms to what
//! their parent holds so far, before the parent's own, as kustomize does.
//!
//! What cannot be known without kustomize fetching or running something (a remote resource, a
//! Helm chart, a plugin), or without applying a patch that may touch images or names
//! ([`patches`]), is reported as [`Unverifiable`] with the kustomization's file and line,
//! never guessed; so is a path leaving the repository, a symlink, a missing file or a cycle.
//!
//! Pure: every file comes through a [`Tree`], the Git tree of a commit in `tagpin verify`
//! ([`crate::git::Mirror::read_path`]), a map of files in the tests.

mod gaps;
mod images;
mod kustomization;
mod patches;
mod paths;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::manifest::kustomize::KUSTOMIZATION_NAMES;
use crate::manifest::{self, ContainerList, Origin, MAX_FILE_BYTES};
use crate::workload::WorkloadId;
pub use gaps::{Gap, Unverifiable};
pub use kustomization::Kind;
use kustomization::{Entry, Kustomization};
use paths::Resolved;

/// Kustomizations nested deeper than this (an overlay of an overlay of …) are not followed.
/// Real repositories stay under five levels; the bound keeps a crafted tree cheap.
pub(crate) const MAX_NESTING: usize = 20;

/// A render builds at most this many kustomizations, counting a base again each time it is
/// included: two bases each including the next level twice would otherwise double the work at
/// every level.
pub(crate) const MAX_INCLUDES: usize = 1000;

/// What one path of the repository holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    File(Vec<u8>),
    Directory,
    Missing,
    /// A symlink, at the path or on the way to it: never followed.
    Symlink,
    /// Anything else that cannot be read (a submodule, a failed read), with the reason.
    Refused(String),
}

/// The files of the repository, by path relative to its root.
pub trait Tree {
    fn lookup(&self, path: &Path) -> Lookup;
}

impl<F: Fn(&Path) -> Lookup> Tree for F {
    fn lookup(&self, path: &Path) -> Lookup {
        self(path)
    }
}

/// A place in a file, for messages and to tell which file field a rendered image came from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub path: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.line)
    }
}

/// An `images:` entry that replaced a container's image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedEntry {
    pub at: Place,
    /// The entry's `name:`, the image it matches.
    pub name: String,
}

/// One container of a rendered workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// The live identity: namespace and name after every transform. No namespace when no
    /// kustomization and no manifest sets one (the verifier's default namespace applies).
    pub workload: WorkloadId,
    pub container: String,
    pub list: ContainerList,
    /// The image as kustomize renders it.
    pub image: String,
    /// The container's `image:` field in its manifest.
    pub written: Place,
    /// The `images:` entries that replaced the image, in the order kustomize applied them.
    pub replaced_by: Vec<AppliedEntry>,
}

impl Container {
    /// Where the rendered image came from: the last entry that replaced it, else the manifest.
    pub fn source(&self) -> &Place {
        self.replaced_by
            .last()
            .map_or(&self.written, |entry| &entry.at)
    }
}

/// What one kustomization renders to.
#[derive(Debug, Clone, Default)]
pub struct Render {
    /// The kustomization file rendered.
    pub kustomization: PathBuf,
    /// `None` when it could not be read as a kustomization (see `unverifiable`).
    pub kind: Option<Kind>,
    pub containers: Vec<Container>,
    /// Every file the render read: kustomizations, resources, patch and replacement files.
    pub files: BTreeSet<PathBuf>,
    /// Why the render is incomplete; empty when `containers` is exactly what kustomize builds.
    pub unverifiable: Vec<Unverifiable>,
}

/// Renders the kustomization file `kustomization` (a path relative to the repository's root)
/// as a GitOps tool would apply it.
pub fn render(kustomization: &Path, tree: &dyn Tree) -> Render {
    let mut builder = Builder {
        tree,
        files: BTreeSet::new(),
        unverifiable: Vec::new(),
        includes: 0,
    };
    let dir = kustomization.parent().unwrap_or(Path::new(""));
    let at = At {
        path: kustomization,
        line: 1,
        column: 1,
    };
    let (kind, containers) = match builder.load(dir, at) {
        Some((file, k)) => {
            let kind = k.kind;
            let mut chain = vec![file.clone()];
            (Some(kind), builder.build(&file, k, &mut chain, Vec::new()))
        }
        None => (None, Vec::new()),
    };
    Render {
        kustomization: kustomization.to_path_buf(),
        kind,
        containers,
        files: builder.files,
        unverifiable: builder.unverifiable,
    }
}

/// Renders the roots among `kustomizations` (the kustomization files under the configured
/// paths): the `Kustomization`s that no other one of them includes, directly or through files
/// elsewhere in the repository. They are what a GitOps tool applies; the others are bases and
/// components, rendered as part of their roots.
pub(crate) fn render_roots(kustomizations: &[PathBuf], tree: &dyn Tree) -> Vec<Render> {
    let renders: Vec<Render> = kustomizations.iter().map(|k| render(k, tree)).collect();
    let included: BTreeSet<PathBuf> = renders
        .iter()
        .flat_map(|r| r.files.iter().filter(|f| **f != r.kustomization).cloned())
        .collect();
    renders
        .into_iter()
        .filter(|r| r.kind == Some(Kind::Kustomization) && !included.contains(&r.kustomization))
        .collect()
}

/// Where an entry is written: a problem with what it leads to is reported there.
#[derive(Debug, Clone, Copy)]
struct At<'a> {
    path: &'a Path,
    line: usize,
    column: usize,
}

impl<'a> At<'a> {
    fn entry(path: &'a Path, entry: &Entry) -> At<'a> {
        At {
            path,
            line: entry.line,
            column: entry.column,
        }
    }
}

/// What a path of a kustomization leads to, once found in the repository.
enum Found {
    File(Vec<u8>),
    Directory,
}

/// One render under way: what it has read, and what it could not follow.
struct Builder<'t> {
    tree: &'t dyn Tree,
    files: BTreeSet<PathBuf>,
    unverifiable: Vec<Unverifiable>,
    /// Kustomizations included so far, bounded by [`MAX_INCLUDES`].
    includes: usize,
}

impl Builder<'_> {
    fn problem(&mut self, at: At<'_>, gap: Gap, detail: String) {
        self.unverifiable.push(Unverifiable::new(
            at.path,
            (at.line, at.column),
            gap,
            detail,
        ));
    }

    /// Finds and reads the kustomization file of `dir`.
    fn load(&mut self, dir: &Path, at: At<'_>) -> Option<(PathBuf, Kustomization)> {
        let mut found = Vec::new();
        for name in KUSTOMIZATION_NAMES {
            let path = dir.join(name);
            match self.tree.lookup(&path) {
                Lookup::File(bytes) => found.push((path, bytes)),
                Lookup::Missing | Lookup::Directory => {}
                Lookup::Symlink => {
                    let detail = format!("{} is a symlink, never followed", path.display());
                    self.problem(at, Gap::Symlink, detail);
                    return None;
                }
                Lookup::Refused(why) => {
                    self.problem(at, Gap::Unreadable, format!("{}: {why}", path.display()));
                    return None;
                }
            }
        }
        if found.len() > 1 {
            let detail = format!("{} holds more than one kustomization file", dir.display());
            self.problem(at, Gap::Invalid, detail);
            return None;
        }
        let Some((path, bytes)) = found.pop() else {
            let detail = format!(
                "{} holds no kustomization ({})",
                dir.display(),
                KUSTOMIZATION_NAMES.join(", ")
            );
            self.problem(at, Gap::Missing, detail);
            return None;
        };
        self.files.insert(path.clone());
        let read = match text(&path, &bytes) {
            Ok(text) => kustomization::read(&path, text).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match read {
            Ok(k) => Some((path, k)),
            Err(detail) => {
                self.problem(at, Gap::Unreadable, detail);
                None
            }
        }
    }

    /// Builds the kustomization of `dir`, which must be of kind `expected`, onto `held`: empty
    /// for a resource (a base is built on its own), the parent's objects so far for a
    /// component. `chain` holds the kustomizations being built, outermost first.
    fn include(
        &mut self,
        dir: &Path,
        expected: Kind,
        at: At<'_>,
        chain: &mut Vec<PathBuf>,
        held: Vec<Container>,
    ) -> Vec<Container> {
        self.includes += 1;
        if self.includes > MAX_INCLUDES {
            if self.includes == MAX_INCLUDES + 1 {
                let detail = format!("more than {MAX_INCLUDES} kustomizations included");
                self.problem(at, Gap::TooLarge, detail);
            }
            return held;
        }
        let Some((file, k)) = self.load(dir, at) else {
            return held;
        };
        if k.kind != expected {
            let detail = format!(
                "{} is a {:?}, where kustomize expects a {expected:?}",
                file.display(),
                k.kind
            );
            self.problem(at, Gap::Invalid, detail);
            return held;
        }
        if chain.contains(&file) {
            let mut cycle: Vec<String> = chain.iter().map(|p| p.display().to_string()).collect();
            cycle.push(file.display().to_string());
            let detail = format!("kustomizations include each other: {}", cycle.join(" -> "));
            self.problem(at, Gap::Cycle, detail);
            return held;
        }
        if chain.len() >= MAX_NESTING {
            let detail = format!(
                "{} is nested deeper than {MAX_NESTING} kustomizations",
                file.display()
            );
            self.problem(at, Gap::TooLarge, detail);
            return held;
        }

        chain.push(file.clone());
        let built = self.build(&file, k, chain, held);
        chain.pop();
        built
    }

    /// Builds a kustomization read from `file` onto `held`, as kustomize's `accumulateTarget`
    /// does: its resources, then its components, then its own transforms over everything.
    fn build(
        &mut self,
        file: &Path,
        mut k: Kustomization,
        chain: &mut Vec<PathBuf>,
        held: Vec<Container>,
    ) -> Vec<Container> {
        self.unverifiable.append(&mut k.gaps);
        let mut held = held;
        for entry in &k.resources {
            self.resource(At::entry(file, entry), &entry.value, chain, &mut held);
        }
        for entry in &k.components {
            held = self.component(At::entry(file, entry), &entry.value, chain, held);
        }
        for entry in &k.patch_files {
            self.check_file(
                At::entry(file, entry),
                &entry.value,
                "patch",
                patches::patch_gap,
            );
        }
        for entry in &k.replacement_files {
            let check = patches::replacements_file_gap;
            self.check_file(At::entry(file, entry), &entry.value, "replacements", check);
        }
        transform(file, &k, &mut held);
        held
    }

    /// A `resources:` entry: a file of manifests, or a directory holding a kustomization.
    fn resource(
        &mut self,
        at: At<'_>,
        entry: &str,
        chain: &mut Vec<PathBuf>,
        held: &mut Vec<Container>,
    ) {
        let Some((path, found)) = self.locate(at, entry, "resource") else {
            return;
        };
        match found {
            Found::File(bytes) => match workloads(&path, &bytes) {
                Ok(containers) => held.extend(containers),
                Err(error) => {
                    self.problem(at, Gap::Unreadable, format!("resource {entry}: {error}"))
                }
            },
            Found::Directory => {
                let built = self.include(&path, Kind::Kustomization, at, chain, Vec::new());
                held.extend(built);
            }
        }
    }

    /// A `components:` entry: a directory holding a `kind: Component`.
    fn component(
        &mut self,
        at: At<'_>,
        entry: &str,
        chain: &mut Vec<PathBuf>,
        held: Vec<Container>,
    ) -> Vec<Container> {
        match self.locate(at, entry, "component") {
            Some((path, Found::Directory)) => self.include(&path, Kind::Component, at, chain, held),
            Some((_, Found::File(_))) => {
                self.problem(
                    at,
                    Gap::Invalid,
                    format!("component {entry} is a file, not a directory"),
                );
                held
            }
            None => held,
        }
    }

    /// A patch or replacements file: read, and checked by `check`.
    fn check_file(
        &mut self,
        at: At<'_>,
        entry: &str,
        what: &str,
        check: fn(&Path, &str) -> Option<String>,
    ) {
        let Some((path, found)) = self.locate(at, entry, what) else {
            return;
        };
        let Found::File(bytes) = found else {
            self.problem(at, Gap::Invalid, format!("{what} {entry} is a directory"));
            return;
        };
        match text(&path, &bytes) {
            Ok(text) => {
                if let Some(why) = check(&path, text) {
                    self.problem(at, Gap::Patch, format!("{what} {entry}: {why}"));
                }
            }
            Err(error) => self.problem(at, Gap::Unreadable, error.to_string()),
        }
    }

    /// Resolves an entry of the kustomization at `at` and looks it up. What cannot be followed
    /// (remote, outside the repository, missing, a symlink) is recorded, and `None` returned.
    fn locate(&mut self, at: At<'_>, entry: &str, what: &str) -> Option<(PathBuf, Found)> {
        let dir = at.path.parent().unwrap_or(Path::new(""));
        let remote = |entry: &str| {
            format!("{what} {entry} is remote; tagpin renders only the repository's files")
        };
        let path = match paths::resolve(dir, entry) {
            Resolved::Local(path) => path,
            Resolved::Remote => {
                self.problem(at, Gap::Remote, remote(entry));
                return None;
            }
            Resolved::Outside => {
                self.problem(
                    at,
                    Gap::OutsideRepository,
                    format!("{what} {entry} is outside the repository"),
                );
                return None;
            }
        };
        match self.tree.lookup(&path) {
            Lookup::File(bytes) => {
                self.files.insert(path.clone());
                Some((path, Found::File(bytes)))
            }
            Lookup::Directory => Some((path, Found::Directory)),
            Lookup::Missing if paths::looks_remote(entry) => {
                self.problem(at, Gap::Remote, remote(entry));
                None
            }
            Lookup::Missing => {
                let detail = format!("{what} {entry}: the repository has no {}", path.display());
                self.problem(at, Gap::Missing, detail);
                None
            }
            Lookup::Symlink => {
                let detail = format!(
                    "{what} {entry}: {} is a symlink, never followed",
                    path.display()
                );
                self.problem(at, Gap::Symlink, detail);
                None
            }
            Lookup::Refused(why) => {
                self.problem(at, Gap::Unreadable, format!("{what} {entry}: {why}"));
                None
            }
        }
    }
}

/// Why a file the renderer reads (a kustomization, a patch) has no text it can read.
#[derive(Debug, thiserror::Error)]
enum TextError {
    #[error("{}: larger than {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}: not valid UTF-8", path.display())]
    NotUtf8 {
        path: PathBuf,
        #[source]
        source: std::str::Utf8Error,
    },
}

/// The text of a file, within the size the scanner accepts, or why not.
fn text<'b>(path: &Path, bytes: &'b [u8]) -> Result<&'b str, TextError> {
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(TextError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    std::str::from_utf8(bytes).map_err(|source| TextError::NotUtf8 {
        path: path.to_path_buf(),
        source,
    })
}

/// The containers of the workloads in a resource file, as written, read by the scanner.
fn workloads(path: &Path, bytes: &[u8]) -> Result<Vec<Container>, manifest::ManifestError> {
    let outcome = manifest::scan(path, bytes)?;
    let containers = outcome
        .fields
        .into_iter()
        .filter_map(|field| match field.origin {
            Origin::Container {
                workload,
                container,
                list,
                ..
            } => Some(Container {
                workload,
                container,
                list,
                image: field.value,
                written: Place {
                    path: path.to_path_buf(),
                    line: field.line,
                    column: field.column,
                },
                replaced_by: Vec::new(),
            }),
            Origin::KustomizeImage { .. } | Origin::HelmImage(_) => None,
        });
    Ok(containers.collect())
}

/// Applies a kustomization's `namespace:`, `namePrefix:`, `nameSuffix:` and `images:` to every
/// container it holds. kustomize's namespace replaces a manifest's own; the images transform
/// leaves `ephemeralContainers` alone.
fn transform(file: &Path, k: &Kustomization, held: &mut [Container]) {
    for c in held.iter_mut() {
        if let Some(namespace) = &k.namespace {
            c.workload.namespace = Some(namespace.clone());
        }
        if !c.workload.name.is_empty() {
            c.workload.name = format!("{}{}{}", k.name_prefix, c.workload.name, k.name_suffix);
        }
    }
    for entry in &k.images {
        for c in held.iter_mut() {
            if c.list == ContainerList::EphemeralContainers {
                continue;
            }
            if let Some(image) = entry.apply(&c.image) {
                c.image = image;
                c.replaced_by.push(AppliedEntry {
                    at: Place {
                        path: file.to_path_buf(),
                        line: entry.line,
                        column: entry.column,
                    },
                    name: entry.name.clone(),
                });
            }
        }
    }
}

/// What tests here and in the verifier share: a repository held in memory.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use std::collections::BTreeMap;

    /// A repository held in memory; a file whose text starts with `symlink:` is a symlink.
    pub(crate) fn repo(files: &[(&str, &str)]) -> impl Fn(&Path) -> Lookup {
        let files: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        move |path: &Path| {
            let symlinked = path
                .ancestors()
                .any(|a| files.get(a).is_some_and(|t| t.starts_with("symlink:")));
            if symlinked {
                return Lookup::Symlink;
            }
            match files.get(path) {
                Some(text) => Lookup::File(text.clone().into_bytes()),
                None if files.keys().any(|k| k.starts_with(path)) => Lookup::Directory,
                None => Lookup::Missing,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::repo;
    use super::*;

    const D: &str = "sha256:4444444444444444444444444444444444444444444444444444444444444444";

    fn deployment(name: &str, containers: &str) -> String {
        format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n{containers}")
    }

    fn web() -> String {
        deployment(
            "web",
            "      containers:\n      - name: web\n        image: ghcr.io/acme/web:1.3\n",
        )
    }

    /// `namespace/Kind/name container image` of every rendered container.
    fn seen(render: &Render) -> Vec<String> {
        render
            .containers
            .iter()
            .map(|c| format!("{} {} {}", c.workload, c.container, c.image))
            .collect()
    }

    fn gaps(render: &Render) -> Vec<Gap> {
        render.unverifiable.iter().map(|u| u.gap).collect()
    }

    fn render_str(root: &str, files: &[(&str, &str)]) -> Render {
        render(Path::new(root), &repo(files))
    }

    /// [`render_str`] over files whose paths and text are made at run time.
    fn render_owned(root: &str, files: &[(String, String)]) -> Render {
        let borrowed: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        render_str(root, &borrowed)
    }

    #[test]
    fn an_overlay_renames_moves_and_pins_the_base_workload() {
        let overlay = format!(
            "resources: [../../base]\nnamespace: prod\nnamePrefix: prod-\nimages:\n- name: ghcr.io/acme/web\n  newTag: '1.4'\n  digest: {D}\n"
        );
        let render = render_str(
            "overlays/prod/kustomization.yaml",
            &[
                ("base/kustomization.yaml", "resources: [deployment.yaml]\n"),
                ("base/deployment.yaml", &web()),
                ("overlays/prod/kustomization.yaml", &overlay),
            ],
        );
        assert_eq!(
            seen(&render),
            [format!(
                "prod/Deployment/prod-web web ghcr.io/acme/web:1.4@{D}"
            )]
        );
        let c = &render.containers[0];
        assert_eq!(c.written.to_string(), "base/deployment.yaml:9");
        assert_eq!(c.source().to_string(), "overlays/prod/kustomization.yaml:5");
        assert_eq!(c.replaced_by[0].name, "ghcr.io/acme/web");
        assert!(render.unverifiable.is_empty());
        assert_eq!(
            render
                .files
                .iter()
                .map(|p| p.to_str().unwrap())
                .collect::<Vec<_>>(),
            [
                "base/deployment.yaml",
                "base/kustomization.yaml",
                "overlays/prod/kustomization.yaml"
            ]
        );
    }

    #[test]
    fn prefixes_suffixes_and_namespaces_accumulate_down_the_chain() {
        let render = render_str(
            "top/kustomization.yaml",
            &[
                ("base/kustomization.yaml", "namespace: base-ns\nnamePrefix: b-\nnameSuffix: -b\nresources: [d.yaml, pod.yaml]\n"),
                ("base/d.yaml", &web()),
                ("base/pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: own}\nspec: {containers: [{name: c, image: busybox}]}\n"),
                ("mid/kustomization.yaml", "namePrefix: m-\nnameSuffix: -m\nresources: [../base]\n"),
                ("top/kustomization.yaml", "namePrefix: t-\nresources: [../mid]\n"),
            ],
        );
        // The innermost namespace wins until an outer one is set; a manifest's own is replaced.
        assert_eq!(
            seen(&render),
            [
                "base-ns/Deployment/t-m-b-web-b-m web ghcr.io/acme/web:1.3",
                "base-ns/Pod/t-m-b-p-b-m c busybox",
            ]
        );
        let render = render_str(
            "plain/kustomization.yaml",
            &[
                ("plain/kustomization.yaml", "resources: [d.yaml]\n"),
                ("plain/d.yaml", &web()),
            ],
        );
        // No namespace anywhere: none, so the verifier's default applies.
        assert_eq!(seen(&render), ["Deployment/web web ghcr.io/acme/web:1.3"]);
    }

    #[test]
    fn images_entries_apply_in_order_and_an_overlay_matches_the_name_a_base_wrote() {
        let render = render_str(
            "o/kustomization.yaml",
            &[
                ("b/kustomization.yaml", "resources: [d.yaml]\nimages:\n- {name: ghcr.io/acme/web, newName: mirror.example.com/web}\n"),
                ("b/d.yaml", &deployment("web", "      containers: [{name: web, image: 'ghcr.io/acme/web:1.3'}, {name: side, image: 'ghcr.io/acme/web-side:1'}]\n      initContainers: [{name: init, image: 'ghcr.io/acme/web:1.3'}]\n      ephemeralContainers: [{name: debug, image: 'ghcr.io/acme/web:1.3'}]\n")),
                ("o/kustomization.yaml", &format!("resources: [../b]\nimages:\n- {{name: ghcr.io/acme/web, newTag: '9'}}\n- {{name: mirror.example.com/web, newTag: '1.4'}}\n- {{name: mirror.example.com/web, digest: {D}}}\n")),
            ],
        );
        assert_eq!(
            seen(&render),
            [
                format!("Deployment/web web mirror.example.com/web@{D}"),
                "Deployment/web side ghcr.io/acme/web-side:1".to_string(),
                format!("Deployment/web init mirror.example.com/web@{D}"),
                "Deployment/web debug ghcr.io/acme/web:1.3".to_string(),
            ]
        );
        let lines: Vec<usize> = render.containers[0]
            .replaced_by
            .iter()
            .map(|e| e.at.line)
            .collect();
        assert_eq!(
            lines,
            [3, 4, 5],
            "the base's entry, then the overlay's two that match"
        );
        assert_eq!(
            render.containers[0].source().path,
            Path::new("o/kustomization.yaml")
        );
    }

    #[test]
    fn components_transform_what_their_parent_holds_before_the_parent_does() {
        let render = render_str(
            "o/kustomization.yaml",
            &[
                ("b/kustomization.yaml", "resources: [d.yaml]\n"),
                ("b/d.yaml", &web()),
                ("c/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nnamePrefix: c-\nresources: [job.yaml]\nimages: [{name: ghcr.io/acme/web, newName: mirror/web}]\n"),
                ("c/job.yaml", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: migrate}\nspec: {template: {spec: {containers: [{name: m, image: 'ghcr.io/acme/web:1.3'}]}}}\n"),
                ("o/kustomization.yaml", "namePrefix: o-\nnamespace: prod\nresources: [../b]\ncomponents: [../c]\n"),
            ],
        );
        assert_eq!(
            seen(&render),
            [
                "prod/Deployment/o-c-web web mirror/web:1.3",
                "prod/Job/o-c-migrate m mirror/web:1.3",
            ]
        );
    }

    #[test]
    fn a_cycle_is_reported_and_ends() {
        let render = render_str(
            "root/kustomization.yaml",
            &[
                ("root/kustomization.yaml", "resources: [../a]\n"),
                ("a/kustomization.yaml", "resources: [../b, d.yaml]\n"),
                ("a/d.yaml", &web()),
                ("b/kustomization.yaml", "resources: [../a]\n"),
            ],
        );
        assert_eq!(gaps(&render), [Gap::Cycle]);
        assert_eq!(
            render.unverifiable[0].to_string(),
            "b/kustomization.yaml:1:13: kustomizations include each other: root/kustomization.yaml -> a/kustomization.yaml -> b/kustomization.yaml -> a/kustomization.yaml"
        );
        assert_eq!(seen(&render), ["Deployment/web web ghcr.io/acme/web:1.3"]);
    }

    #[test]
    fn nesting_is_bounded() {
        let mut files: Vec<(String, String)> = (0..30)
            .map(|i| {
                (
                    format!("k{i}/kustomization.yaml"),
                    format!("resources: [../k{}]\n", i + 1),
                )
            })
            .collect();
        files.push(("k30/kustomization.yaml".into(), "resources: []\n".into()));
        let render = render_owned("k0/kustomization.yaml", &files);
        assert_eq!(gaps(&render), [Gap::TooLarge]);
    }

    #[test]
    fn includes_are_bounded_when_bases_fan_out() {
        // Each level includes ten wrappers of the next: 10^4 builds at four levels if unbounded.
        let mut files = vec![(
            "l4/kustomization.yaml".to_string(),
            "resources: []\n".to_string(),
        )];
        for level in 0..4 {
            let wrappers: Vec<String> = (0..10).map(|j| format!("w{j}")).collect();
            let text = format!("resources: [{}]\n", wrappers.join(", "));
            files.push((format!("l{level}/kustomization.yaml"), text));
            for w in wrappers {
                let text = format!("namePrefix: {w}-\nresources: [../../l{}]\n", level + 1);
                files.push((format!("l{level}/{w}/kustomization.yaml"), text));
            }
        }
        let render = render_owned("l0/kustomization.yaml", &files);
        assert_eq!(gaps(&render), [Gap::TooLarge]);
        assert!(render.unverifiable[0].detail.starts_with("more than 1000"));
    }

    #[test]
    fn remote_resources_and_helm_charts_are_unverifiable_with_file_and_line() {
        let render = render_str(
            "o/kustomization.yaml",
            &[
                ("o/kustomization.yaml", "resources:\n- https://github.com/acme/base?ref=v1\n- github.com/acme/platform//web?ref=v2\n- d.yaml\nhelmCharts:\n- {name: redis, repo: 'https://charts.example.com'}\n"),
                ("o/d.yaml", &web()),
            ],
        );
        assert_eq!(gaps(&render), [Gap::HelmChart, Gap::Remote, Gap::Remote]);
        assert_eq!(
            render.unverifiable[1].to_string(),
            "o/kustomization.yaml:2:3: resource https://github.com/acme/base?ref=v1 is remote; tagpin renders only the repository's files"
        );
        // What is local is still read, so its files are known to belong to this render.
        assert_eq!(seen(&render), ["Deployment/web web ghcr.io/acme/web:1.3"]);
    }

    #[test]
    fn a_patch_that_may_change_an_image_is_unverifiable_and_one_that_does_not_is_not() {
        let image_patch = deployment("web", "      containers: [{name: web, image: 'evil:1'}]\n");
        let render = render_str(
            "o/kustomization.yaml",
            &[
                ("o/kustomization.yaml", "resources: [d.yaml]\npatches:\n- path: replicas.yaml\n- path: image.yaml\n"),
                ("o/d.yaml", &web()),
                ("o/replicas.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 3}\n"),
                ("o/image.yaml", &image_patch),
            ],
        );
        assert_eq!(gaps(&render), [Gap::Patch]);
        assert_eq!(
            render.unverifiable[0].to_string(),
            "o/kustomization.yaml:4:9: patch image.yaml: the patch sets `containers`"
        );
        assert!(render.files.contains(Path::new("o/image.yaml")));
    }

    #[test]
    fn paths_out_of_the_repository_symlinks_and_missing_files_are_named() {
        let render = render_str(
            "o/kustomization.yaml",
            &[
                ("o/kustomization.yaml", "resources:\n- ../../outside\n- /etc/k8s/base\n- linked\n- gone.yaml\n- ../empty\n"),
                ("o/linked", "symlink:../b"),
                ("empty/readme.md", "no kustomization here"),
            ],
        );
        assert_eq!(
            gaps(&render),
            [
                Gap::OutsideRepository,
                Gap::OutsideRepository,
                Gap::Symlink,
                Gap::Missing,
                Gap::Missing
            ]
        );
        assert_eq!(
            render.unverifiable[3].to_string(),
            "o/kustomization.yaml:5:3: resource gone.yaml: the repository has no o/gone.yaml"
        );
    }

    #[test]
    fn what_kustomize_refuses_or_cannot_read_is_named() {
        let render = render_str(
            "o/kustomization.yaml",
            &[
                (
                    "o/kustomization.yaml",
                    "resources: [../c, broken.yaml]\ncomponents: [../b]\n",
                ),
                (
                    "o/broken.yaml",
                    "apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n",
                ),
                ("c/kustomization.yaml", "kind: Component\n"),
                ("b/kustomization.yaml", "resources: []\n"),
            ],
        );
        assert_eq!(gaps(&render), [Gap::Invalid, Gap::Unreadable, Gap::Invalid]);
        assert!(
            render.unverifiable[1]
                .to_string()
                .starts_with("o/kustomization.yaml:1:19: resource broken.yaml: o/broken.yaml:4:"),
            "{}",
            render.unverifiable[1]
        );
    }

    #[test]
    fn roots_are_the_kustomizations_nothing_else_includes() {
        let files = [
            (
                "apps/web/kustomization.yaml",
                "resources: [d.yaml]\n".to_string(),
            ),
            ("apps/web/d.yaml", web()),
            (
                "overlays/staging/kustomization.yaml",
                "namespace: staging\nresources: [../../apps/web]\n".into(),
            ),
            (
                "overlays/prod/kustomization.yaml",
                "namespace: prod\nresources: [../../apps/web]\ncomponents: [../../components/x]\n"
                    .into(),
            ),
            (
                "components/x/kustomization.yaml",
                "kind: Component\n".into(),
            ),
            (
                "flux/kustomization.yaml",
                "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n".into(),
            ),
        ];
        let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        let paths: Vec<PathBuf> = files
            .iter()
            .filter(|(p, _)| p.ends_with("kustomization.yaml"))
            .map(|(p, _)| PathBuf::from(p))
            .collect();
        let roots = render_roots(&paths, &repo(&files));
        let names: Vec<&Path> = roots.iter().map(|r| r.kustomization.as_path()).collect();
        assert_eq!(
            names,
            [
                Path::new("overlays/staging/kustomization.yaml"),
                Path::new("overlays/prod/kustomization.yaml")
            ]
        );
        assert_eq!(
            seen(&roots[1]),
            ["prod/Deployment/web web ghcr.io/acme/web:1.3"]
        );
    }
}
