//! Images in Helm values: what a pinned Helm image is, and where values live.
//!
//! Most GitOps repositories deploy Helm releases, and a chart's images live in its values, not
//! in a container's `image:` field: an `image:` block (`repository`, optional `registry`, `tag`
//! or `version`, `digest` or `sha`), or an `image: repo:tag` string, at any depth. Values sit in
//! values files, in a Flux `HelmRelease`'s `spec.values`, or in an Argo CD `Application`'s Helm
//! source (`valuesObject`, `values` as a YAML text, `parameters`). What the scanner records for
//! each such image ([`HelmImage`]: its source, key path, repository, tag, digest, and how a
//! digest is written into it) is defined with the other scanned fields in `field.rs`, and read
//! by the planner, the promoter and the verifier; `helm_values` finds images in one values tree and `helm_objects` finds the
//! values of HelmReleases and Applications.

use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::error::ManifestError;
pub use super::field::{HelmImage, HelmPart, HelmSource, HelmWrite};

/// How a digest is added to a block that has no digest key (`helm.digest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DigestMode {
    /// `tag: 1.2.3@sha256:…`.
    #[default]
    Tag,
    /// A `digest: sha256:…` line after `tag:`.
    Key,
}

/// What the scanner needs to know about Helm: which files are values files and how a digest
/// is added to a block without a digest key. Compiled once from the configuration.
#[derive(Debug, Clone, Default)]
pub struct HelmOptions {
    values_files: Option<GlobSet>,
    pub digest: DigestMode,
}

impl HelmOptions {
    /// Options with `values_files` globs (relative to a scanned directory, `**` crossing
    /// directories) on top of the file names every chart uses.
    pub fn new(values_files: &[String], digest: DigestMode) -> Result<HelmOptions, ManifestError> {
        let globs = if values_files.is_empty() {
            None
        } else {
            let mut builder = GlobSetBuilder::new();
            for pattern in values_files {
                let glob = GlobBuilder::new(pattern)
                    .literal_separator(true)
                    .build()
                    .map_err(|error| ManifestError::InvalidGlob {
                        glob: pattern.clone(),
                        message: error.kind().to_string(),
                    })?;
                builder.add(glob);
            }
            Some(
                builder
                    .build()
                    .map_err(|error| ManifestError::InvalidGlob {
                        glob: values_files.join(", "),
                        message: error.to_string(),
                    })?,
            )
        };
        Ok(HelmOptions {
            values_files: globs,
            digest,
        })
    }

    /// Whether the file at `path` holds Helm values: named `values.yaml`, `values-*.yaml` or
    /// `values.*.yaml` (or `.yml`), or matched by a `helm.values_files` glob. Globs match the
    /// path as given and every suffix of it, so `envs/*/values.prod.yaml` matches whether the
    /// scan was given the repository root or a directory above it.
    pub fn is_values_file(&self, path: &Path) -> bool {
        if is_values_file_name(path) {
            return true;
        }
        let Some(globs) = &self.values_files else {
            return false;
        };
        let mut rest = path;
        loop {
            if globs.is_match(rest) {
                return true;
            }
            let mut components = rest.components();
            if components.next().is_none() {
                return false;
            }
            rest = components.as_path();
            if rest.as_os_str().is_empty() {
                return false;
            }
        }
    }
}

/// The values file names of the Helm ecosystem's conventions.
fn is_values_file_name(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
        return false;
    };
    let Some(stem) = name
        .strip_suffix(".yaml")
        .or_else(|| name.strip_suffix(".yml"))
    else {
        return false;
    };
    stem == "values"
        || stem
            .strip_prefix("values-")
            .or_else(|| stem.strip_prefix("values."))
            .is_some_and(|rest| !rest.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_files_are_known_by_their_names() {
        let options = HelmOptions::default();
        for yes in [
            "values.yaml",
            "charts/web/values.yml",
            "envs/values-production.yaml",
            "values.staging.yaml",
        ] {
            assert!(options.is_values_file(Path::new(yes)), "{yes}");
        }
        for no in [
            "values-.yaml",
            "myvalues.yaml",
            "values.json",
            "deploy/web.yaml",
            "values",
        ] {
            assert!(!options.is_values_file(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn configured_globs_name_more_values_files_wherever_the_scan_starts() {
        let options = HelmOptions::new(&["envs/*/helm.yaml".to_string()], DigestMode::Key).unwrap();
        assert!(options.is_values_file(Path::new("envs/prod/helm.yaml")));
        assert!(options.is_values_file(Path::new("repo/envs/prod/helm.yaml")));
        assert!(!options.is_values_file(Path::new("envs/prod/app.yaml")));
        assert!(!options.is_values_file(Path::new("envs/prod/x/helm.yaml")));
    }

    #[test]
    fn an_invalid_glob_is_named() {
        let error = HelmOptions::new(&["a/[b".to_string()], DigestMode::Tag).unwrap_err();
        assert!(
            error.to_string().starts_with("invalid glob \"a/[b\""),
            "{error}"
        );
    }

    #[test]
    fn sources_name_their_object() {
        let source = HelmSource::Application {
            namespace: Some("argocd".into()),
            name: "web".into(),
            source: Some(1),
            document: 0,
        };
        assert_eq!(source.to_string(), "Application argocd/web sources[1]");
    }
}
