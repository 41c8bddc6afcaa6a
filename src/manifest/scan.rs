//! The scanner's entry point and what it reports: image fields with exact byte spans.
//!
//! A rewrite that keeps every other byte of the file needs to know where each image value sits in
//! the file as written, quotes included. [`scan`] reads a file's documents through the
//! position-keeping tree of `yaml`, hands each to the walk that understands it
//! ([`super::kubernetes`] for objects, [`super::kustomize`] for kustomizations) and gathers the
//! results, each target once. It does no I/O: the caller reads the file and hands over its bytes.

use std::path::Path;

use super::error::{ManifestError, MAX_FILE_BYTES};
use super::field::{Collector, ImageField, SkippedField};
use super::helm::{HelmOptions, HelmPart, HelmSource};
use super::helm_objects;
use super::helm_values::{self, Context};
use super::kubernetes;
use super::kustomize;
use super::yaml::{self, Document};

/// Everything `scan` learned about one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Image fields to pin, in document order, each target listed once (aliases and merge keys
    /// can make several containers share one value; the first one found names it).
    pub fields: Vec<ImageField>,
    pub skipped: Vec<SkippedField>,
    /// YAML documents in the file.
    pub documents: usize,
    /// Documents with `apiVersion` and `kind` (any kind), plus kustomizations, plus the values
    /// document of a Helm values file. Zero means "not a Kubernetes manifest (nor values)",
    /// which callers report differently from "no images".
    pub kubernetes_documents: usize,
    /// What those documents are, in file order and once each: their `kind`s as written
    /// (`Rollout`, `Service`), `Kustomization` for a kustomization, `Helm values` for a values
    /// file; so that a file with no image can say what it holds.
    pub holds: Vec<String>,
}

/// Finds the image fields of every document in `source`, the contents of the file at `path`.
///
/// `path` names the file in errors and tells a kustomization file by its name
/// (`kustomization.yaml`, `kustomization.yml`, `Kustomization`). Spans are byte offsets into
/// `source`, including a leading byte order mark if there is one.
pub fn scan(path: &Path, source: &[u8]) -> Result<ScanOutcome, ManifestError> {
    scan_with_options(path, source, &HelmOptions::default())
}

/// [`scan`], with the configuration's Helm settings: which files are values files
/// (`helm.values_files`) and where a digest goes in an image block without a digest key
/// (`helm.digest`). A values file's first document is its values (Helm reads no other).
pub fn scan_with_options(
    path: &Path,
    source: &[u8],
    helm: &HelmOptions,
) -> Result<ScanOutcome, ManifestError> {
    let size = source.len() as u64;
    if size > MAX_FILE_BYTES {
        return Err(ManifestError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit: MAX_FILE_BYTES,
        });
    }
    let text = std::str::from_utf8(source).map_err(|error| ManifestError::NotUtf8 {
        path: path.to_path_buf(),
        byte: error.valid_up_to(),
    })?;
    let kustomization_file = kustomize::is_kustomization_file(path);

    let mut collector = Collector::default();
    let mut outcome = ScanOutcome::default();
    if helm.is_values_file(path) {
        if let Some(document) = yaml::documents(path, text).next() {
            let document = document?;
            outcome.documents = 1;
            if let Some(root) = document.root().filter(|&root| document.is_mapping(root)) {
                let context = Context {
                    source: HelmSource::ValuesFile {
                        path: path.to_path_buf(),
                    },
                    part: HelmPart::Values,
                    digest: helm.digest,
                };
                helm_values::scan_values(&document, root, &context, &mut collector)?;
                outcome.kubernetes_documents = 1;
                outcome.holds.push("Helm values".to_string());
            }
        }
        outcome.fields = collector.fields;
        outcome.skipped = collector.skipped;
        return Ok(outcome);
    }
    for document in yaml::documents(path, text) {
        let document = document?;
        let index = outcome.documents;
        outcome.documents += 1;
        if let Some(holds) =
            scan_document(&document, index, kustomization_file, helm, &mut collector)?
        {
            outcome.kubernetes_documents += 1;
            if !outcome.holds.contains(&holds) {
                outcome.holds.push(holds);
            }
        }
    }
    outcome.fields = collector.fields;
    outcome.skipped = collector.skipped;
    Ok(outcome)
}

/// Collects the fields of document number `index`; returns what it is (its `kind`, or
/// `Kustomization`) when it is a Kubernetes document (an object with `apiVersion` and `kind`,
/// or a kustomization), `None` otherwise.
fn scan_document(
    document: &Document<'_>,
    index: usize,
    kustomization_file: bool,
    helm: &HelmOptions,
    out: &mut Collector,
) -> Result<Option<String>, ManifestError> {
    let Some(root) = document.root().map(|root| document.resolve(root)) else {
        return Ok(None);
    };
    if !document.is_mapping(root) {
        return Ok(None);
    }
    let kind = document.get_str(root, "kind")?;
    let api_version = document.get_str(root, "apiVersion")?;
    if kustomize::is_kustomization(kind, api_version, kustomization_file) {
        kustomize::scan_images(document, root, index, out)?;
        return Ok(Some(kind.unwrap_or("Kustomization").to_string()));
    }
    let (Some(kind), Some(api_version)) = (kind, api_version) else {
        return Ok(None);
    };
    if helm_objects::is_helm_object(kind, api_version) {
        helm_objects::scan_object(document, root, index, helm, out)?;
        return Ok(Some(kind.to_string()));
    }
    kubernetes::scan_objects(document, root, index, out)?;
    Ok(Some(kind.to_string()))
}

/// What the tests of the scanner's modules share: they drive each layer through [`scan`],
/// whose image fields (values, spans, positions) are the contract all of them serve.
#[cfg(test)]
pub(super) mod fixtures {
    use super::*;
    use crate::manifest::{ScalarStyle, Target};

    pub(crate) fn scan_str(path: &str, text: &str) -> ScanOutcome {
        scan(Path::new(path), text.as_bytes()).unwrap_or_else(|error| panic!("{error}"))
    }

    /// The error scanning `text` as the file `path` must give.
    pub(crate) fn scan_error(path: &str, text: &str) -> ManifestError {
        match scan(Path::new(path), text.as_bytes()) {
            Ok(outcome) => panic!("{path} scanned: {outcome:?}"),
            Err(error) => error,
        }
    }

    pub(crate) fn written<'t>(text: &'t str, field: &ImageField) -> &'t str {
        match &field.target {
            Target::Scalar { span, .. } => &text[span.clone()],
            Target::InsertKustomizeDigest { .. } | Target::InsertHelmParameter { .. } => {
                panic!("not a scalar target: {field:?}")
            }
        }
    }

    /// `field` is written as `as_written` in `text`, at `at` (line, column).
    #[track_caller]
    pub(crate) fn assert_written_at(
        text: &str,
        field: &ImageField,
        as_written: &str,
        at: (usize, usize),
    ) {
        assert_eq!(written(text, field), as_written);
        assert_eq!((field.line, field.column), at);
    }

    pub(crate) fn style(field: &ImageField) -> ScalarStyle {
        match &field.target {
            Target::Scalar { style, .. } => *style,
            Target::InsertKustomizeDigest { .. } | Target::InsertHelmParameter { .. } => {
                panic!("not a scalar target: {field:?}")
            }
        }
    }

    /// How many images and how many Kubernetes documents scanning `text` finds.
    pub(crate) fn images_and_objects(path: &str, text: &str) -> (usize, usize) {
        let outcome = scan_str(path, text);
        (outcome.fields.len(), outcome.kubernetes_documents)
    }

    /// Why each skipped image of the scanned `text` was skipped, in order.
    pub(crate) fn skip_reasons(path: &str, text: &str) -> Vec<crate::manifest::SkipReason> {
        scan_str(path, text)
            .skipped
            .iter()
            .map(|s| s.reason)
            .collect()
    }

    pub(crate) fn deployment(containers: &str) -> String {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n{containers}"
        )
    }

    pub(crate) const ONE_CONTAINER: &str =
        "      containers:\n      - name: app\n        image: nginx:1.27\n";
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use crate::manifest::{ContainerList, Origin, SkipReason};
    use proptest::prelude::*;

    #[test]
    fn alias_image_resolves_to_the_anchored_scalar_once() {
        let text = deployment(concat!(
            "      initContainers:\n      - name: migrate\n        image: &app registry.example.com/app:2.3 # shared\n",
            "      containers:\n      - name: app\n        image: *app\n      - name: worker\n        image: *app\n",
        ));
        let outcome = scan_str("web.yaml", &text);
        assert_eq!(outcome.fields.len(), 1);
        let field = &outcome.fields[0];
        assert_eq!(written(&text, field), "registry.example.com/app:2.3");
        assert_eq!(field.line, 10);
        // Containers are visited before initContainers: the first to reach the value names it.
        assert!(matches!(
            &field.origin,
            Origin::Container {
                list: ContainerList::Containers,
                ..
            }
        ));
    }

    #[test]
    fn multi_document_files_number_their_documents() {
        let text = concat!(
            "apiVersion: v1\nkind: ConfigMap\ndata: {image: 'not:this'}\n",
            "---\n# just a comment\n---\nhello: world\n",
            "---\napiVersion: v1\nkind: Pod\nspec: {containers: [{name: a, image: a:1}]}\n",
            "...\n",
        );
        let outcome = scan_str("all.yaml", text);
        assert_eq!(outcome.documents, 4);
        assert_eq!(outcome.kubernetes_documents, 2);
        assert_eq!(outcome.fields.len(), 1);
        assert!(matches!(
            outcome.fields[0].origin,
            Origin::Container { document: 3, .. }
        ));
    }

    #[test]
    fn yaml_that_is_not_kubernetes_yields_nothing_and_no_error() {
        let text = "services:\n  web:\n    image: nginx:1.27\n";
        let outcome = scan_str("docker-compose.yaml", text);
        assert_eq!(outcome.fields, []);
        assert_eq!((outcome.documents, outcome.kubernetes_documents), (1, 0));
    }

    #[test]
    fn kind_without_api_version_is_not_a_kubernetes_document() {
        let text = "kind: Pod\nspec: {containers: [{name: a, image: a:1}]}\n";
        assert_eq!(images_and_objects("pod.yaml", text), (0, 0));
    }

    #[test]
    fn empty_file_has_no_documents() {
        let outcome = scan_str("empty.yaml", "");
        assert_eq!((outcome.documents, outcome.kubernetes_documents), (0, 0));
    }

    #[test]
    fn block_scalar_image_is_skipped_with_a_reason() {
        let text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: >-\n      nginx:1.27\n";
        let outcome = scan_str("pod.yaml", text);
        assert!(outcome.fields.is_empty());
        assert_eq!(outcome.skipped.len(), 1);
        assert_eq!(outcome.skipped[0].reason, SkipReason::BlockScalar);
        // A block scalar's value starts on the line after its indicator.
        assert_eq!(outcome.skipped[0].line, 7);
    }

    #[test]
    fn empty_and_non_string_images_are_skipped() {
        let text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - {name: a, image: }\n  - {name: b, image: ''}\n  - {name: c, image: [x]}\n  - {name: d, image: null}\n  - {name: e}\n";
        assert_eq!(
            skip_reasons("pod.yaml", text),
            [
                SkipReason::Empty,
                SkipReason::Empty,
                SkipReason::NotAString,
                SkipReason::Empty
            ]
        );
    }

    #[test]
    fn file_over_the_limit_is_refused_without_parsing() {
        let size = usize::try_from(MAX_FILE_BYTES).unwrap_or(usize::MAX) + 1;
        // Not YAML at all: the size check must come first.
        let bytes = vec![b'\t'; size];
        let error = scan(Path::new("deploy/big.yaml"), &bytes).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("deploy/big.yaml: file is {size} bytes, larger than the 16777216-byte limit")
        );
    }

    #[test]
    fn non_utf8_input_is_an_error_naming_the_byte() {
        let mut bytes = b"apiVersion: v1\nk: ".to_vec();
        bytes.push(0xff);
        let error = scan(Path::new("x.yaml"), &bytes).unwrap_err();
        assert_eq!(error.to_string(), "x.yaml: not valid UTF-8 (byte 18)");
    }

    proptest! {
        #[test]
        fn scanning_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = scan(Path::new("fuzz.yaml"), &bytes);
        }

        #[test]
        fn scanning_yaml_like_text_never_panics(
            text in "([-:{}\\[\\],&*!|>'\"#?%@ \t\r\n\u{feff}é😀]|apiVersion|kind|Pod|List|items|spec|containers|image|images|newTag|name|digest|<<|[a-z0-9]){0,300}"
        ) {
            let _ = scan(Path::new("kustomization.yaml"), text.as_bytes());
            let _ = scan(Path::new("fuzz.yaml"), text.as_bytes());
        }
    }
}
