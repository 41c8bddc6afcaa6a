//! What the scanner reports, shared by the walks that find image fields
//! ([`super::kubernetes`], [`super::kustomize`]), the scanner that runs them ([`super::scan`])
//! and the rewriter ([`super::rewrite`]): where a value sits in the file and what owns it.

use std::collections::HashSet;
use std::ops::Range;
use std::path::PathBuf;

use super::yaml::{Node, NodeKind, Style};
use crate::workload::WorkloadId;

/// Which list of a pod spec a container came from; reports name it the way `kubectl` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerList {
    Containers,
    InitContainers,
    EphemeralContainers,
}

impl ContainerList {
    pub(super) const ALL: [ContainerList; 3] = [
        ContainerList::Containers,
        ContainerList::InitContainers,
        ContainerList::EphemeralContainers,
    ];

    /// The pod spec key holding this list.
    pub fn key(self) -> &'static str {
        match self {
            ContainerList::Containers => "containers",
            ContainerList::InitContainers => "initContainers",
            ContainerList::EphemeralContainers => "ephemeralContainers",
        }
    }
}

/// How a scalar is written in the file; a rewrite keeps it so a diff shows only the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarStyle {
    Plain,
    SingleQuoted,
    DoubleQuoted,
}

/// What an image field belongs to, so plans, diffs and the verifier can name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A container of a workload. `workload` is the object that owns the pod spec (for a
    /// `kind: List`, the item, not the list); its name is empty when the object has no
    /// `metadata.name`. `document` is the 0-based index of the YAML document.
    Container {
        workload: WorkloadId,
        container: String,
        list: ContainerList,
        document: usize,
    },
    /// An entry of a kustomization's `images:` list. `name` is the entry's `name` (the image
    /// the kustomization replaces); `current_digest` is its `digest:` value, when there is one.
    /// `tag` is where the entry's `newTag` value is, for a policy that moves the tag (the
    /// field's own target is the digest); `None` only on skipped entries.
    KustomizeImage {
        name: String,
        document: usize,
        current_digest: Option<String>,
        tag: Option<Target>,
    },
    /// An image in Helm values (a values file, a Flux HelmRelease, an Argo CD Application):
    /// its source, key path, repository, tag and digest, and how a digest is written.
    HelmImage(Box<HelmImage>),
}

/// Where a new value goes in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Replace this scalar (a byte range of the file, quotes included), keeping its style.
    Scalar {
        span: Range<usize>,
        style: ScalarStyle,
    },
    /// A kustomize entry or a Helm image block without a `digest:` key: insert one. For a block
    /// mapping, a new line `<indent>digest: <value>` goes at byte `at`, which is the end of a
    /// line (the entry's last line; the Helm block's `tag:` line), before its line break, so a
    /// trailing comment stays where it is. For a flow mapping, `, digest: <value>` goes at
    /// `at`, the end of a value.
    InsertKustomizeDigest {
        at: usize,
        indent: String,
        flow: bool,
    },
    /// An Argo CD `helm.parameters` list without a `<path>.digest` parameter, under
    /// `helm.digest: key`: a new item `- name: <name>` / `  value: <value>` goes at byte `at`,
    /// the end of the tag parameter's last line, its dash indented by `indent`.
    InsertHelmParameter {
        at: usize,
        indent: String,
        name: String,
    },
}

impl Target {
    /// The bytes of the original file this target replaces (empty for an insertion).
    pub fn span(&self) -> Range<usize> {
        match self {
            Target::Scalar { span, .. } => span.clone(),
            Target::InsertKustomizeDigest { at, .. } | Target::InsertHelmParameter { at, .. } => {
                *at..*at
            }
        }
    }
}

/// One image field tagpin can pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageField {
    /// 1-based line of the value in the file (for an alias, of the anchored value).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The image to resolve. For a container, the decoded `image` scalar as written (it may
    /// already carry a digest). For a kustomize entry, `newName` (else `name`) plus `:newTag`;
    /// the entry's current digest is in [`Origin::KustomizeImage`].
    pub value: String,
    pub target: Target,
    pub origin: Origin,
}

impl ImageField {
    /// The digest the field pins now: a container image's, a kustomize entry's `digest:`, the
    /// digest Helm values pin (wherever the block writes it).
    pub fn pinned_digest(&self) -> Option<crate::reference::Digest> {
        let digest = match &self.origin {
            Origin::Container { .. } => {
                let reference = crate::reference::Reference::parse(&self.value).ok()?;
                return reference.digest().cloned();
            }
            Origin::KustomizeImage { current_digest, .. } => current_digest.as_deref(),
            Origin::HelmImage(image) => image.digest.as_deref(),
        };
        digest.and_then(|d| crate::reference::Digest::parse(d).ok())
    }

    /// Who holds the field, as plans name it: its workload and container, a kustomize entry's
    /// image name, a Helm image's holder and key path.
    pub fn owner(&self) -> (crate::workload::Owner, String) {
        use crate::workload::Owner;
        match &self.origin {
            Origin::Container {
                workload,
                container,
                ..
            } => (Owner::Workload(workload.clone()), container.clone()),
            Origin::KustomizeImage { name, .. } => (Owner::Kustomization, name.clone()),
            Origin::HelmImage(image) => (
                Owner::Helm(image.source.owner_name()),
                image.key_path.clone(),
            ),
        }
    }
}

/// Why a field that looks like an image was not offered for pinning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// `|` and `>` scalars cannot be replaced without re-indenting lines; nobody writes images so.
    BlockScalar,
    /// The value is a mapping or a sequence.
    NotAString,
    /// The value is empty or null.
    Empty,
    /// A kustomize `images:` entry that is not a mapping.
    KustomizeEntryNotAMapping,
    /// A kustomize entry without `name:`.
    KustomizeWithoutName,
    /// A kustomize entry without `newTag:`: the tag lives in the base, there is nothing to pin
    /// here.
    KustomizeWithoutNewTag,
    /// A kustomize entry whose last value is empty or a block scalar, so there is no safe place
    /// to insert a `digest:` line.
    KustomizeNoPlaceForDigest,
    /// A Helm image block whose tag is empty or absent: the chart fills it from its
    /// `appVersion`, which is not in this repository.
    HelmTagFromChart,
    /// A Helm image block whose `repository` is empty: the chart's own default applies.
    HelmNoRepository,
    /// A Helm image block whose tag carries a digest while its `digest`/`sha` key holds
    /// another: which one runs depends on the chart's template.
    HelmTwoDigests,
    /// An Argo CD `helm.values` text that cannot be edited in place (a folded `>` scalar, an
    /// image value spanning lines, or YAML inside it that does not parse).
    HelmValuesText,
    /// An Argo CD `helm.parameters` tag whose repository is set neither by a parameter nor in
    /// the same source's values: it comes from the chart.
    HelmParameterWithoutRepository,
    /// The value a digest would go into is shared: merged in with `<<`, an alias, or the
    /// anchor of one, so writing it would change other images too.
    HelmSharedValue,
    /// `helm.digest: key` and no safe place to add a digest: a flow list of parameters, or a
    /// tag key that does not start its line.
    HelmNoPlaceForDigest,
    /// The block's `digest:` key has no value at all (not even `""`), so there are no bytes
    /// to replace.
    HelmEmptyDigest,
    /// An `image:` string in Helm values with neither a tag nor a digest, and no `tag:` beside
    /// it: the chart may append one of its own (`{{ .image }}:{{ .Chart.AppVersion }}`), and
    /// a pin written into the string would break the reference it builds.
    HelmImageWithoutTag,
    /// An `image:` string without a tag beside `registry:`, `digest:` or `sha:` keys
    /// (ingress-nginx: `registry`, `image`, `tag`, `digest`, `digestChroot`): the chart
    /// composes the reference from them in a way tagpin does not know.
    HelmImageComposed,
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            SkipReason::BlockScalar => "block scalars (| or >) are not supported for images",
            SkipReason::NotAString => "the value is not a string",
            SkipReason::Empty => "the value is empty",
            SkipReason::KustomizeEntryNotAMapping => "the images entry is not a mapping",
            SkipReason::KustomizeWithoutName => "the images entry has no name",
            SkipReason::KustomizeWithoutNewTag => {
                "the images entry has no newTag (the tag is set in the base)"
            }
            SkipReason::KustomizeNoPlaceForDigest => {
                "no safe place to insert digest: (the entry's last value is empty or a block scalar)"
            }
            SkipReason::HelmTagFromChart => {
                "the image's tag is empty: the chart sets it from its appVersion"
            }
            SkipReason::HelmNoRepository => {
                "the image's repository is empty: the chart's default applies"
            }
            SkipReason::HelmTwoDigests => {
                "the tag carries a digest and the digest key holds another"
            }
            SkipReason::HelmValuesText => {
                "helm.values text cannot be edited in place here (folded scalar, multi-line value or invalid YAML inside); use valuesObject"
            }
            SkipReason::HelmParameterWithoutRepository => {
                "no parameter or value of this source sets the image's repository"
            }
            SkipReason::HelmSharedValue => {
                "the value is shared (a << merge, an alias or an anchor): writing it would change other images"
            }
            SkipReason::HelmNoPlaceForDigest => {
                "no safe place to add a digest here (helm.digest: key); add a digest key or use helm.digest: tag"
            }
            SkipReason::HelmEmptyDigest => "the digest key has no value to replace (write digest: \"\")",
            SkipReason::HelmImageComposed => {
                "the chart composes this image from image: and the registry, digest or sha keys beside it; tagpin does not know how"
            }
            SkipReason::HelmImageWithoutTag => {
                "the image has no tag and no tag: beside it, so the chart may add one; write the tag (repo:latest) to pin it"
            }
        };
        f.write_str(text)
    }
}

/// A field tagpin found but will not touch, with the reason, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedField {
    pub line: usize,
    pub column: usize,
    pub reason: SkipReason,
    pub origin: Origin,
}

/// Results across the documents of a file, deduplicated by target.
#[derive(Default)]
pub(super) struct Collector {
    pub(super) fields: Vec<ImageField>,
    pub(super) skipped: Vec<SkippedField>,
    targets: HashSet<(usize, usize, bool)>,
}

impl Collector {
    pub(super) fn field(&mut self, field: ImageField) {
        let span = field.target.span();
        let insert = !matches!(field.target, Target::Scalar { .. });
        if self.targets.insert((span.start, span.end, insert)) {
            self.fields.push(field);
        }
    }

    pub(super) fn skip(&mut self, node: &Node, reason: SkipReason, origin: Origin) {
        self.skipped.push(SkippedField {
            line: node.line,
            column: node.column,
            reason,
            origin,
        });
    }
}

/// The style a scalar is rewritten in, one rule for every scanner: a block scalar (`|`, `>`)
/// is not replaced in place.
pub(super) fn inline_style(style: Style) -> Result<ScalarStyle, SkipReason> {
    match style {
        Style::Plain => Ok(ScalarStyle::Plain),
        Style::SingleQuoted => Ok(ScalarStyle::SingleQuoted),
        Style::DoubleQuoted => Ok(ScalarStyle::DoubleQuoted),
        Style::Literal | Style::Folded => Err(SkipReason::BlockScalar),
    }
}

/// A scalar that can be replaced in place: its value and target, or why not.
pub(super) fn string_target<'n>(node: &'n Node<'_>) -> Result<(&'n str, Target), SkipReason> {
    let NodeKind::Scalar { value, style } = &node.kind else {
        return Err(SkipReason::NotAString);
    };
    let style = inline_style(*style)?;
    if value.is_empty()
        || (style == ScalarStyle::Plain && matches!(value.as_ref(), "~" | "null" | "Null" | "NULL"))
    {
        return Err(SkipReason::Empty);
    }
    Ok((
        value,
        Target::Scalar {
            span: node.span.clone(),
            style,
        },
    ))
}
// Images in Helm values, as the scanner records them (found by `helm_values` and
// `helm_objects`, see `helm.rs`).

/// What holds a set of Helm values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HelmSource {
    /// A values file (`values.yaml`, `values-production.yaml`, a `helm.values_files` match):
    /// the path as the scan was given it.
    ValuesFile { path: PathBuf },
    /// A Flux `HelmRelease` (`helm.toolkit.fluxcd.io`): its `spec.values`. `document` is the
    /// 0-based YAML document of the file.
    HelmRelease {
        namespace: Option<String>,
        name: String,
        document: usize,
    },
    /// An Argo CD `Application`'s Helm source: `spec.source` (`source: None`) or
    /// `spec.sources[source]`.
    Application {
        namespace: Option<String>,
        name: String,
        source: Option<usize>,
        document: usize,
    },
}

impl std::fmt::Display for HelmSource {
    /// `values file`, `HelmRelease flux-system/podinfo`, `Application argocd/web`,
    /// `Application argocd/web sources[1]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let qualified = |namespace: &Option<String>, name: &str| match namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_string(),
        };
        match self {
            HelmSource::ValuesFile { .. } => f.write_str("values file"),
            HelmSource::HelmRelease {
                namespace, name, ..
            } => write!(f, "HelmRelease {}", qualified(namespace, name)),
            HelmSource::Application {
                namespace,
                name,
                source,
                ..
            } => {
                write!(f, "Application {}", qualified(namespace, name))?;
                match source {
                    Some(index) => write!(f, " sources[{index}]"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl HelmSource {
    /// The name plans and PR tables give the owner of the image (see
    /// [`crate::workload::Owner::Helm`]): `values`, `HelmRelease/<ns>/<name>`,
    /// `Application/<ns>/<name>[/sources[<i>]]`.
    pub fn owner_name(&self) -> String {
        let qualified = |namespace: &Option<String>, name: &str| match namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_string(),
        };
        match self {
            HelmSource::ValuesFile { .. } => "values".to_string(),
            HelmSource::HelmRelease {
                namespace, name, ..
            } => format!("HelmRelease/{}", qualified(namespace, name)),
            HelmSource::Application {
                namespace,
                name,
                source,
                ..
            } => match source {
                Some(index) => format!(
                    "Application/{}/sources[{index}]",
                    qualified(namespace, name)
                ),
                None => format!("Application/{}", qualified(namespace, name)),
            },
        }
    }
}

/// Which part of its source the image was found in. Argo CD merges them in this order, later
/// ones winning: `values`, `valuesObject`, `parameters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HelmPart {
    /// A values file, or a HelmRelease's `spec.values`.
    Values,
    /// An Application's `helm.valuesObject`.
    ValuesObject,
    /// An Application's `helm.values`, a YAML document inside a block scalar.
    ValuesText,
    /// An Application's `helm.parameters` (`{name: image.tag, value: …}`).
    Parameters,
}

/// How the digest is written into the image's values: the field's [`Target`] is where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HelmWrite {
    /// One string, `image: nginx:1.27`: written `nginx:1.27@sha256:…`, like a container image.
    Reference,
    /// The block's `digest:` value: written `sha256:…`; the tag stays.
    DigestKey,
    /// The block's `sha:` value (older prometheus-community charts): the hex, without
    /// `sha256:`; the tag stays.
    ShaKey,
    /// The tag itself: written `1.2.3@sha256:…` (`helm.digest: tag`, or a tag already written
    /// so); charts that render `repository:tag` then pull by digest.
    TagSuffix,
    /// A `digest:` key inserted after `tag:` at the same indentation (`helm.digest: key`).
    InsertDigest,
}

/// One image of a set of Helm values, as the scanner found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelmImage {
    pub source: HelmSource,
    pub part: HelmPart,
    /// The dotted path, in the values, of the value holding the tag (`controller.image.tag`,
    /// `sidecars[0].image.tag`), of the string for a [`HelmWrite::Reference`] image (`image`),
    /// or of the digest for a block with no tag. For parameters, the parameter's name.
    pub key_path: String,
    /// The normalized repository, registry included: `docker.io/bitnami/nginx`.
    pub repository: String,
    /// The tag as written (`1.27.3-debian-12-r5`), without a digest written into it.
    pub tag: Option<String>,
    /// The digest the values pin now (`sha256:…`), wherever it is written.
    pub digest: Option<String>,
    pub write: HelmWrite,
    /// Where the tag's text is, for a tag policy that moves it together with the digest
    /// (`None` for [`HelmWrite::Reference`] and [`HelmWrite::TagSuffix`], whose target already
    /// holds the tag, and for a block without a tag).
    pub tag_target: Option<Target>,
}
