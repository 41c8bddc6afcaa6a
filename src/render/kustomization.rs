//! One kustomization file, read into what the renderer acts on, with the position of each
//! entry so that a problem is named by file and line.
//!
//! The renderer follows `resources:` (and the legacy `bases:`) and `components:`, and applies
//! `namespace:`, `namePrefix:`, `nameSuffix:` and `images:`. Everything else that can change
//! which workload runs which image is either checked here and found harmless (a patch that
//! changes replicas), or recorded as a [`Gap`]: Helm charts, generator and transformer plugins,
//! patches and replacements that may touch images or names. Patch and replacement files are
//! listed for the renderer to read and check, since reading is its job.

use std::path::{Path, PathBuf};

use super::gaps::{Gap, Unverifiable};
use super::images::{self, ImagesEntry};
use super::patches;
use crate::manifest::kustomize::is_kustomization;
use crate::manifest::yaml::{self, Document, NodeId};
use crate::manifest::ManifestError;

/// Whether a kustomization file is a `Kustomization` (what a GitOps tool applies) or a
/// `Component` (what kustomizations include).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    #[default]
    Kustomization,
    Component,
}

/// Why a kustomization file cannot be read; each names the file (and line and column where
/// the YAML says).
#[derive(Debug, thiserror::Error)]
pub enum KustomizationError {
    #[error(transparent)]
    Yaml(#[from] ManifestError),
    #[error("{}: a kustomization is a mapping", path.display())]
    NotAMapping { path: PathBuf },
    /// A Flux `Kustomization`, say, which has another apiVersion.
    #[error(
        "{}: not a kustomize kustomization (apiVersion {}, kind {})",
        path.display(),
        api_version.as_deref().unwrap_or("none"),
        kind.as_deref().unwrap_or("none")
    )]
    NotAKustomization {
        path: PathBuf,
        api_version: Option<String>,
        kind: Option<String>,
    },
}

/// A string entry of a list (a resource, a component, a patch file), where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub value: String,
    pub line: usize,
    pub column: usize,
}

/// What the renderer needs of one kustomization.
#[derive(Debug, Default)]
pub(super) struct Kustomization {
    pub kind: Kind,
    /// `resources:` then `bases:`: files and directories, in order.
    pub resources: Vec<Entry>,
    pub components: Vec<Entry>,
    pub namespace: Option<String>,
    pub name_prefix: String,
    pub name_suffix: String,
    pub images: Vec<ImagesEntry>,
    /// Patch files (`patches[].path`, `patchesStrategicMerge`, `patchesJson6902[].path`).
    pub patch_files: Vec<Entry>,
    /// Replacement files (`replacements[].path`).
    pub replacement_files: Vec<Entry>,
    /// What this kustomization does that the renderer cannot follow.
    pub gaps: Vec<Unverifiable>,
}

/// Reads the kustomization at `path` (its text `text`). A file that is not YAML, or not a
/// kustomize kustomization (a Flux `Kustomization` has another apiVersion), is an error naming
/// the file (and line and column).
pub(super) fn read(path: &Path, text: &str) -> Result<Kustomization, KustomizationError> {
    let Some(document) = yaml::documents(path, text).next() else {
        return Ok(Kustomization::default());
    };
    let document = document?;
    let Some(root) = document.root().map(|root| document.resolve(root)) else {
        return Ok(Kustomization::default());
    };
    if !document.is_mapping(root) {
        return Err(KustomizationError::NotAMapping {
            path: path.to_path_buf(),
        });
    }
    let kind = document.get_str(root, "kind")?;
    let api_version = document.get_str(root, "apiVersion")?;
    if !is_kustomization(kind, api_version, true) {
        return Err(KustomizationError::NotAKustomization {
            path: path.to_path_buf(),
            api_version: api_version.map(str::to_string),
            kind: kind.map(str::to_string),
        });
    }
    let reader = Reader {
        path,
        document: &document,
        root,
    };
    let mut k = reader.read()?;
    if kind == Some("Component") {
        k.kind = Kind::Component;
    }
    Ok(k)
}

struct Reader<'a, 'd> {
    path: &'a Path,
    document: &'a Document<'d>,
    root: NodeId,
}

impl Reader<'_, '_> {
    fn read(&self) -> Result<Kustomization, ManifestError> {
        let d = self.document;
        let mut k = Kustomization {
            namespace: d.get_str(self.root, "namespace")?.map(str::to_string),
            name_prefix: d
                .get_str(self.root, "namePrefix")?
                .unwrap_or("")
                .to_string(),
            name_suffix: d
                .get_str(self.root, "nameSuffix")?
                .unwrap_or("")
                .to_string(),
            images: images::read_all(d, self.root)?,
            ..Kustomization::default()
        };
        k.resources = self.strings("resources")?;
        k.resources.extend(self.strings("bases")?);
        k.components = self.strings("components")?;
        for key in ["helmCharts", "helmChartInflationGenerator"] {
            self.gap_if_any(
                &mut k,
                key,
                Gap::HelmChart,
                "Helm renders it, and tagpin does not run Helm",
            )?;
        }
        for key in ["generators", "transformers"] {
            self.gap_if_any(&mut k, key, Gap::Plugin, "a plugin can change any object")?;
        }
        self.patches(&mut k)?;
        self.replacements(&mut k)?;
        Ok(k)
    }

    /// The scalar items of a list, each with its position.
    fn strings(&self, key: &str) -> Result<Vec<Entry>, ManifestError> {
        let d = self.document;
        let Some(list) = d.get(self.root, key)? else {
            return Ok(Vec::new());
        };
        Ok(d.items(list)
            .iter()
            .filter_map(|&item| self.entry(item))
            .collect())
    }

    /// A scalar node as an [`Entry`] (block scalars included: inline patches are written so).
    fn entry(&self, node: NodeId) -> Option<Entry> {
        let d = self.document;
        let (value, _) = d.scalar(node)?;
        let at = d.node(d.resolve(node))?;
        Some(Entry {
            value: value.to_string(),
            line: at.line,
            column: at.column,
        })
    }

    /// Records `gap` at `key` when its list has any item.
    fn gap_if_any(
        &self,
        k: &mut Kustomization,
        key: &str,
        gap: Gap,
        why: &str,
    ) -> Result<(), ManifestError> {
        let d = self.document;
        if let Some((key_node, list)) = d.get_entry(self.root, key)? {
            if !d.items(list).is_empty() || d.is_mapping(list) {
                let position = self.position(key_node);
                k.gaps.push(Unverifiable::new(
                    self.path,
                    position,
                    gap,
                    format!("{key}: {why}"),
                ));
            }
        }
        Ok(())
    }

    fn position(&self, node: NodeId) -> (usize, usize) {
        let d = self.document;
        d.node(d.resolve(node))
            .map_or((1, 1), |n| (n.line, n.column))
    }

    /// `patches`, `patchesStrategicMerge`, `patchesJson6902`: inline patches are checked now,
    /// patch files are listed for the renderer to read.
    fn patches(&self, k: &mut Kustomization) -> Result<(), ManifestError> {
        let d = self.document;
        for key in ["patches", "patchesJson6902"] {
            let Some(list) = d.get(self.root, key)? else {
                continue;
            };
            for &item in d.items(list) {
                let position = self.position(item);
                for option in ["allowNameChange", "allowKindChange"] {
                    let allowed = d.get_path(item, &["options", option])?;
                    if allowed
                        .and_then(|node| d.scalar(node))
                        .is_some_and(|(v, _)| v == "true")
                    {
                        let detail =
                            format!("{key}: the patch's {option} option lets it rename objects");
                        k.gaps
                            .push(Unverifiable::new(self.path, position, Gap::Patch, detail));
                    }
                }
                if let Some(file) = d.get(item, "path")?.and_then(|node| self.entry(node)) {
                    k.patch_files.push(file);
                }
                if let Some(inline) = d.get(item, "patch")?.and_then(|node| self.entry(node)) {
                    self.check_inline(k, key, &inline.value, position);
                }
            }
        }
        for entry in self.strings("patchesStrategicMerge")? {
            // kustomize takes an entry that is not a file path as an inline patch.
            if entry.value.contains('\n') {
                self.check_inline(
                    k,
                    "patchesStrategicMerge",
                    &entry.value,
                    (entry.line, entry.column),
                );
            } else {
                k.patch_files.push(entry);
            }
        }
        Ok(())
    }

    fn check_inline(
        &self,
        k: &mut Kustomization,
        key: &str,
        patch: &str,
        position: (usize, usize),
    ) {
        if let Some(why) = patches::patch_gap(self.path, patch) {
            k.gaps.push(Unverifiable::new(
                self.path,
                position,
                Gap::Patch,
                format!("{key}: {why}"),
            ));
        }
    }

    /// `replacements`: inline ones are checked now, files are listed for the renderer.
    fn replacements(&self, k: &mut Kustomization) -> Result<(), ManifestError> {
        let d = self.document;
        let Some(list) = d.get(self.root, "replacements")? else {
            return Ok(());
        };
        for &item in d.items(list) {
            if let Some(file) = d.get(item, "path")?.and_then(|node| self.entry(node)) {
                k.replacement_files.push(file);
            } else if let Some(why) = patches::replacement_gap(d, item) {
                let position = self.position(item);
                k.gaps.push(Unverifiable::new(
                    self.path,
                    position,
                    Gap::Patch,
                    format!("replacements: {why}"),
                ));
            }
        }
        Ok(())
    }
}

/// For tests: reads a kustomization text, panicking on an error.
#[cfg(test)]
pub(super) fn read_str(text: &str) -> Kustomization {
    read(Path::new("k/kustomization.yaml"), text).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(entries: &[Entry]) -> Vec<&str> {
        entries.iter().map(|e| e.value.as_str()).collect()
    }

    fn gaps(k: &Kustomization) -> Vec<String> {
        k.gaps.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn resources_bases_components_and_transforms_are_read() {
        let k = read_str(
            "resources: [../base, web.yaml]\nbases:\n- ../legacy\ncomponents: [../c]\nnamespace: prod\nnamePrefix: prod-\nnameSuffix: -x\nimages: [{name: web, newTag: '2'}]\n",
        );
        assert_eq!(values(&k.resources), ["../base", "web.yaml", "../legacy"]);
        assert_eq!(values(&k.components), ["../c"]);
        assert_eq!(
            (
                k.namespace.as_deref(),
                k.name_prefix.as_str(),
                k.name_suffix.as_str()
            ),
            (Some("prod"), "prod-", "-x")
        );
        assert_eq!(k.images.len(), 1);
        assert_eq!((k.resources[2].line, k.resources[2].column), (3, 3));
        assert_eq!(k.kind, Kind::Kustomization);
        assert!(k.gaps.is_empty());
    }

    #[test]
    fn helm_charts_and_plugins_are_gaps_named_by_line() {
        let k = read_str("resources: [a.yaml]\nhelmCharts:\n- {name: redis, repo: https://charts.example.com}\ntransformers: [t.yaml]\n");
        assert_eq!(
            gaps(&k),
            [
                "k/kustomization.yaml:2:1: helmCharts: Helm renders it, and tagpin does not run Helm",
                "k/kustomization.yaml:4:1: transformers: a plugin can change any object",
            ]
        );
        assert_eq!(k.gaps[0].gap, Gap::HelmChart);
    }

    #[test]
    fn inline_patches_are_checked_and_patch_files_listed() {
        let k = read_str(concat!(
            "patches:\n",
            "- path: replicas.yaml\n",
            "- target: {kind: Deployment}\n  patch: |-\n    - op: replace\n      path: /spec/template/spec/containers/0/image\n      value: evil:1\n",
            "- target: {kind: Deployment, name: web}\n  patch: '{kind: Deployment, metadata: {name: x}, spec: {replicas: 2}}'\n",
            "- target: {kind: Deployment}\n  options: {allowNameChange: true}\n  path: rename.yaml\n",
            "patchesStrategicMerge:\n- smp.yaml\n- |-\n  kind: Deployment\n  metadata: {name: web}\n  spec: {template: {spec: {containers: [{name: a, image: b}]}}}\n",
            "patchesJson6902:\n- {target: {kind: Service, name: web}, path: ops.yaml}\n",
        ));
        assert_eq!(
            values(&k.patch_files),
            ["replicas.yaml", "rename.yaml", "ops.yaml", "smp.yaml"]
        );
        assert_eq!(
            gaps(&k),
            [
                "k/kustomization.yaml:3:3: patches: the operation `replace /spec/template/spec/containers/0/image` changes containers or images",
                "k/kustomization.yaml:10:3: patches: the patch's allowNameChange option lets it rename objects",
                "k/kustomization.yaml:16:3: patchesStrategicMerge: the patch sets `containers`",
            ]
        );
    }

    #[test]
    fn replacements_writing_images_are_gaps_and_files_are_listed() {
        let k = read_str(concat!(
            "replacements:\n- path: r.yaml\n",
            "- source: {kind: ConfigMap, name: v, fieldPath: data.image}\n  targets:\n  - select: {kind: Deployment}\n    fieldPaths: [spec.template.spec.containers.0.image]\n",
        ));
        assert_eq!(values(&k.replacement_files), ["r.yaml"]);
        assert_eq!(k.gaps.len(), 1);
        assert_eq!(k.gaps[0].gap, Gap::Patch);
    }

    #[test]
    fn a_component_says_so_and_a_flux_kustomization_is_not_one_of_kustomize() {
        assert_eq!(
            read_str("apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n").kind,
            Kind::Component
        );
        let flux = read(
            Path::new("flux/kustomization.yaml"),
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nspec: {path: ./x}\n",
        );
        assert_eq!(
            flux.unwrap_err().to_string(),
            "flux/kustomization.yaml: not a kustomize kustomization (apiVersion kustomize.toolkit.fluxcd.io/v1, kind Kustomization)"
        );
    }

    #[test]
    fn invalid_yaml_is_named_with_line_and_column() {
        let error = read(Path::new("o/kustomization.yaml"), "resources: [\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("o/kustomization.yaml:2:1: invalid YAML"),
            "{error}"
        );
    }
}
