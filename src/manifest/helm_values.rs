//! Finding the images of one tree of Helm values, wherever the values live.
//!
//! Charts agree on a few shapes for an image, at any depth of their values: a mapping under an
//! `image` (or `*Image`) key with `repository` and optional `registry`, `tag` or `version`,
//! `digest` (or `sha`, the hex without `sha256:`); or a string `repo:tag` under such a key, or
//! an untagged `image: repo` beside the `tag:` the chart joins to it (argo-helm's redis-ha
//! exporter). A non-empty `global.imageRegistry` overrides every block's registry, as the
//! templates of bitnami, prometheus-community and grafana charts apply it; YAML's null (`null`,
//! `~`, nothing) is "not set" in any of these keys, as charts read it. This walk reports each
//! image with the place a digest goes ([`HelmWrite`]), or why it is skipped; it is shared by
//! values files, HelmReleases and Applications (`super::helm_objects`), which say what holds
//! the values.

use std::collections::HashSet;

use super::error::ManifestError;
use super::field::{
    inline_style, string_target, Collector, ImageField, Origin, SkipReason, Target,
};
use super::helm::{DigestMode, HelmImage, HelmPart, HelmSource, HelmWrite};
use super::kustomize::line_end;
use super::rewrite::looks_like_non_string;
use super::yaml::{Document, Node, NodeId, NodeKind, Style};
use crate::reference::Reference;

/// What holds the values being walked, and how a digest is added where there is no key.
#[derive(Debug, Clone)]
pub(super) struct Context {
    pub(super) source: HelmSource,
    pub(super) part: HelmPart,
    pub(super) digest: DigestMode,
}

/// Collects the images of the values tree at `root` (a mapping) of `document`.
pub(super) fn scan_values(
    document: &Document<'_>,
    root: NodeId,
    context: &Context,
    out: &mut Collector,
) -> Result<(), ManifestError> {
    let global_registry = document
        .get_path(root, &["global", "imageRegistry"])?
        .and_then(|node| set_text(document, node))
        .map(str::to_string);
    let mut walker = Walker {
        document,
        context,
        out,
        visited: HashSet::new(),
        shared: document.alias_targets(),
        merged: document.merge_sources(),
        global_registry,
    };
    walker.walk(root, "")
}

/// Keys beside an untagged `image:` string that make it a part of a reference the chart
/// composes its own way (ingress-nginx: `registry`/`image`/`tag`/`digest`), not one
/// `{{ .image }}:{{ .tag }}`.
const COMPOSED_KEYS: [&str; 5] = ["registry", "repository", "digest", "digestChroot", "sha"];

/// Whether a key names an image: `image`, or a camelCase `*Image` (`configReloaderImage`).
pub(super) fn is_image_key(key: &str) -> bool {
    key == "image" || (key.len() > "Image".len() && key.ends_with("Image"))
}

/// The dotted key path of `key` under `path`.
pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn is_block(style: Style) -> bool {
    matches!(style, Style::Literal | Style::Folded)
}

/// YAML's null as a plain scalar: `null` (any case YAML allows), `~`, or no value at all.
/// Charts read it as "not set" (`{{ if .registry }}`, `default`), never as the word `null`:
/// grafana ships `global.imageRegistry: null`.
fn is_null(value: &str) -> bool {
    matches!(value, "" | "~" | "null" | "Null" | "NULL")
}

/// The text of a value a chart treats as set: a scalar (not a block scalar) that is neither
/// empty nor null. `registry: ""`, `registry: ~` and `registry: null` are all unset; a quoted
/// `"null"` is the string it says.
fn set_text<'d>(document: &'d Document<'_>, node: NodeId) -> Option<&'d str> {
    let (value, style) = document.scalar(node)?;
    let null = style == Style::Plain && is_null(value);
    (!value.is_empty() && !null && !is_block(style)).then_some(value)
}

struct Walker<'w, 'a> {
    document: &'w Document<'a>,
    context: &'w Context,
    out: &'w mut Collector,
    /// Nodes walked already: an alias repeats a subtree, which is reported where it is written.
    visited: HashSet<NodeId>,
    /// Nodes some alias points at: writing one would change every place that repeats it.
    shared: HashSet<NodeId>,
    /// Mappings merged into others with `<<`: writing their entries would change the images
    /// of the mappings that merge them, whatever repository those name.
    merged: HashSet<NodeId>,
    global_registry: Option<String>,
}

/// What an image is made of, wherever its parts are written.
struct Parts<'n> {
    repository: String,
    registry: Option<String>,
    tag: Option<Entry<'n>>,
    digest: Option<Entry<'n>>,
    /// Where to name the image when nothing else places it.
    at: &'n Node<'n>,
    /// Where a digest goes under `helm.digest: key` when there is no digest key.
    insert: Insertion,
}

/// Where a digest is added under `helm.digest: key`.
enum Insertion {
    /// A `digest:` key after the tag's, in a flow mapping or a block one.
    AfterTag { flow: bool },
    /// A prepared place (a new parameter), or none that is safe.
    At(Option<Target>),
    /// Never a key of its own: the chart joins `{{ .image }}:{{ .tag }}` and reads no digest
    /// key, so the digest goes into the tag (`v1.75.0@sha256:…`) whatever `helm.digest` says.
    TagOnly,
}

/// A tag as written and a digest written into it.
type TagParts = (Option<String>, Option<String>);

/// How and where a digest is written and where a moved tag goes, or where and why not.
type Placed<'n> = Result<(HelmWrite, Target, Option<Target>), (&'n Node<'n>, SkipReason)>;

/// A block's `tag`/`version`, or `digest`/`sha`, as written.
struct Entry<'n> {
    key_name: &'static str,
    key: &'n Node<'n>,
    value: &'n Node<'n>,
    /// Whether a new value may be written into it: the block's own entry, written once (not
    /// merged in with `<<`, not an alias, not the anchor of one).
    editable: bool,
}

impl<'w, 'a> Walker<'w, 'a> {
    fn origin(&self, path: String, write: HelmWrite) -> Origin {
        Origin::HelmImage(Box::new(HelmImage {
            source: self.context.source.clone(),
            part: self.context.part,
            key_path: path,
            repository: String::new(),
            tag: None,
            digest: None,
            write,
            tag_target: None,
        }))
    }

    fn walk(&mut self, node: NodeId, path: &str) -> Result<(), ManifestError> {
        let document = self.document;
        let node = document.resolve(node);
        if !self.visited.insert(node) {
            return Ok(());
        }
        for &(key, value) in document.entries(node) {
            let Some((name, _)) = document.scalar(key) else {
                continue;
            };
            if name == "<<" {
                // Merged mappings are anchored elsewhere in the tree and walked there.
                continue;
            }
            let child = join(path, name);
            let image = if is_image_key(name) {
                // Only `image:` has a `tag:` beside it that the chart joins to it.
                let beside = (name == "image").then_some((node, path));
                self.image(value, &child, beside)?
            } else {
                self.named_block(value, &child)?
            };
            if image {
                continue;
            }
            self.walk(value, &child)?;
        }
        for (index, &item) in document.items(node).iter().enumerate() {
            self.walk(item, &format!("{path}[{index}]"))?;
        }
        Ok(())
    }

    /// Reports the image under an image key; false when the value is not an image shape (a
    /// mapping without `repository`), to be walked like any other value. `beside` is the
    /// mapping holding an `image:` key (and its path), whose `tag:` a chart may join to it.
    fn image(
        &mut self,
        value: NodeId,
        path: &str,
        beside: Option<(NodeId, &str)>,
    ) -> Result<bool, ManifestError> {
        let document = self.document;
        let id = document.resolve(value);
        let Some(node) = document.node(id) else {
            return Ok(false);
        };
        match &node.kind {
            NodeKind::Scalar { .. } => {
                if self.visited.insert(id) {
                    self.string_image(node, path, beside)?;
                }
                Ok(true)
            }
            NodeKind::Mapping { .. } if document.get(id, "repository")?.is_some() => {
                if self.visited.insert(id) {
                    self.block(id, path)?;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// A block under a key that does not say "image" (podinfo's `redis: {repository: redis,
    /// tag: 7.0.7}`): an image only when it is unmistakably one, with a `repository` that
    /// reads as an image name (not a URL) and a tag or digest key.
    fn named_block(&mut self, value: NodeId, path: &str) -> Result<bool, ManifestError> {
        let document = self.document;
        let id = document.resolve(value);
        if !document.is_mapping(id) {
            return Ok(false);
        }
        let Some(repository) = document.get_str(id, "repository")? else {
            return Ok(false);
        };
        if repository.contains("://") || Reference::parse(repository).is_err() {
            return Ok(false);
        }
        let mut keyed = false;
        for key in ["tag", "version", "digest", "sha"] {
            keyed |= document.get(id, key)?.is_some();
        }
        if !keyed {
            return Ok(false);
        }
        if self.visited.insert(id) {
            self.block(id, path)?;
        }
        Ok(true)
    }

    /// `image: nginx:1.27`: pinned like a container's image. A plain `true` or `3` under a
    /// key like `useDefaultImage` is not a string, let alone an image.
    ///
    /// A string with neither tag nor digest is no whole reference: beside a `tag:` key
    /// (argo-helm's redis-ha exporter: `image: ghcr.io/oliver006/redis_exporter`, `tag:
    /// v1.75.0`, joined by the chart as `{{ .image }}:{{ .tag }}`) it is the repository of one
    /// image whose digest goes into that tag; alone, the chart may add a tag of its own, so it
    /// is skipped with the reason.
    fn string_image(
        &mut self,
        node: &Node,
        path: &str,
        beside: Option<(NodeId, &str)>,
    ) -> Result<(), ManifestError> {
        let typed = matches!(&node.kind, NodeKind::Scalar { value, style: Style::Plain } if looks_like_non_string(value));
        let found = string_target(node).and_then(|found| {
            if typed {
                Err(SkipReason::NotAString)
            } else {
                Ok(found)
            }
        });
        let (value, target) = match found {
            Ok(found) => found,
            Err(reason) => {
                let origin = self.origin(path.to_string(), HelmWrite::Reference);
                self.out.skip(node, reason, origin);
                return Ok(());
            }
        };
        let reference = Reference::parse(value).ok();
        if let Some(untagged) = reference
            .as_ref()
            .filter(|r| r.tag().is_none() && r.digest().is_none())
        {
            let (tag, composed) = match beside {
                Some((mapping, _)) => (
                    self.entry(mapping, &["tag"])?,
                    self.entry(mapping, &COMPOSED_KEYS)?.is_some(),
                ),
                None => (None, false),
            };
            if composed {
                let origin = self.origin(path.to_string(), HelmWrite::Reference);
                self.out.skip(node, SkipReason::HelmImageComposed, origin);
                return Ok(());
            }
            match (tag, beside) {
                (Some(tag), Some((_, mapping_path))) => {
                    let parts = Parts {
                        repository: untagged.to_string(),
                        registry: None,
                        tag: Some(tag),
                        digest: None,
                        at: node,
                        insert: Insertion::TagOnly,
                    };
                    self.report(parts, mapping_path);
                }
                _ => {
                    let origin = self.origin(path.to_string(), HelmWrite::Reference);
                    self.out.skip(node, SkipReason::HelmImageWithoutTag, origin);
                }
            }
            return Ok(());
        }
        let origin = Origin::HelmImage(Box::new(HelmImage {
            source: self.context.source.clone(),
            part: self.context.part,
            key_path: path.to_string(),
            repository: reference
                .as_ref()
                .map_or_else(|| value.to_string(), Reference::canonical_name),
            tag: reference.as_ref().and_then(|r| r.tag().map(str::to_string)),
            digest: reference
                .as_ref()
                .and_then(|r| r.digest().map(ToString::to_string)),
            write: HelmWrite::Reference,
            tag_target: None,
        }));
        self.out.field(ImageField {
            line: node.line,
            column: node.column,
            value: value.to_string(),
            target,
            origin,
        });
        Ok(())
    }

    /// One entry of the block `block`, the first of `names` it has (own or merged).
    fn entry(
        &self,
        block: NodeId,
        names: &[&'static str],
    ) -> Result<Option<Entry<'w>>, ManifestError> {
        let document: &'w Document<'a> = self.document;
        for &name in names {
            let Some((key, value)) = document.get_entry(block, name)? else {
                continue;
            };
            let own = document
                .entries(block)
                .iter()
                .any(|&(k, v)| k == key && v == value);
            let resolved = document.resolve(value);
            let editable = own
                && resolved == value
                && !self.shared.contains(&value)
                && !self.merged.contains(&document.resolve(block));
            let (Some(key), Some(value)) = (document.node(key), document.node(resolved)) else {
                continue;
            };
            return Ok(Some(Entry {
                key_name: name,
                key,
                value,
                editable,
            }));
        }
        Ok(None)
    }

    /// A mapping with `repository`: the chart's image block.
    fn block(&mut self, block: NodeId, path: &str) -> Result<(), ManifestError> {
        let document = self.document;
        let Some(block_node) = document.node(block) else {
            return Ok(());
        };
        let Some(repository) = self.entry(block, &["repository"])? else {
            return Ok(());
        };
        let Some(repository_text) = self.repository(repository.value, path) else {
            return Ok(());
        };
        // A non-empty `global.imageRegistry` replaces the block's own registry, as bitnami's
        // `common.images.image` (`default .imageRoot.registry .global.imageRegistry`) and the
        // charts that copy it resolve it; a null or empty one leaves it.
        let registry = match &self.global_registry {
            Some(global) => Some(global.clone()),
            None => document
                .get(block, "registry")?
                .and_then(|node| set_text(document, node))
                .map(str::to_string),
        };
        let parts = Parts {
            repository: repository_text.to_string(),
            registry,
            tag: self.entry(block, &["tag", "version"])?,
            digest: self.entry(block, &["digest", "sha"])?,
            at: block_node,
            insert: Insertion::AfterTag {
                flow: is_flow(block_node),
            },
        };
        self.report(parts, path);
        Ok(())
    }

    /// The repository's text, or `None` once the image is skipped for it.
    fn repository<'n>(&mut self, node: &'n Node, path: &str) -> Option<&'n str> {
        match string_target(node) {
            Ok((value, _)) => Some(value),
            Err(reason) => {
                let reason = match reason {
                    SkipReason::Empty => SkipReason::HelmNoRepository,
                    other => other,
                };
                let origin = self.origin(join(path, "repository"), HelmWrite::TagSuffix);
                self.out.skip(node, reason, origin);
                None
            }
        }
    }

    /// Reports an image from its parts: a block's keys, or an Application's parameters.
    fn report(&mut self, parts: Parts<'_>, path: &str) {
        let Parts {
            repository,
            registry,
            tag,
            digest: digest_key,
            at: block_node,
            insert,
        } = parts;
        let Some((tag_text, tag_digest)) = self.read_tag(tag.as_ref(), path) else {
            return;
        };
        let Some(key_digest) = self.read_digest_key(digest_key.as_ref(), path) else {
            return;
        };
        let tag_path = tag.as_ref().map(|t| join(path, t.key_name));
        if let (Some(a), Some(b)) = (&tag_digest, &key_digest) {
            if a != b {
                let at = tag.as_ref().map_or(block_node, |t| t.value);
                let origin = self.origin(tag_path.unwrap_or_default(), HelmWrite::DigestKey);
                self.out.skip(at, SkipReason::HelmTwoDigests, origin);
                return;
            }
        }
        let tag_has_digest = tag_digest.is_some();
        let digest = key_digest.or(tag_digest);
        // The value the field is named by: its tag, else (digest only) its digest.
        let (key_path, at) = match (&tag, &digest_key) {
            (Some(tag), _) if tag_text.is_some() || tag_has_digest => {
                (join(path, tag.key_name), tag.value)
            }
            (_, Some(entry)) if digest.is_some() => (join(path, entry.key_name), entry.value),
            (Some(tag), _) => (join(path, tag.key_name), tag.value),
            (None, _) => (join(path, "tag"), block_node),
        };
        if tag_text.is_none() && digest.is_none() {
            let origin = self.origin(key_path, HelmWrite::TagSuffix);
            self.out.skip(at, SkipReason::HelmTagFromChart, origin);
            return;
        }

        let (value, normalized) = image_text(
            registry.as_deref(),
            &repository,
            tag_text.as_deref(),
            digest.as_deref(),
        );

        // Where the digest goes, and where a moved tag goes.
        let Some(placed) = self.place(
            digest_key.as_ref(),
            tag.as_ref(),
            tag_text.is_some(),
            tag_has_digest,
            insert,
        ) else {
            return;
        };
        let (write, target, tag_target) = match placed {
            Ok(placed) => placed,
            Err((at, why)) => {
                let origin = self.origin(key_path, HelmWrite::TagSuffix);
                self.out.skip(at, why, origin);
                return;
            }
        };
        self.out.field(ImageField {
            line: at.line,
            column: at.column,
            value,
            target,
            origin: Origin::HelmImage(Box::new(HelmImage {
                source: self.context.source.clone(),
                part: self.context.part,
                key_path,
                repository: normalized,
                tag: tag_text,
                digest,
                write,
                tag_target,
            })),
        });
    }

    /// The tag as written, split from a digest written into it (`v1@sha256:…`); `None` when
    /// it cannot be read, the image then skipped with the reason.
    fn read_tag(&mut self, tag: Option<&Entry<'_>>, path: &str) -> Option<TagParts> {
        let Some(tag) = tag else {
            return Some((None, None));
        };
        match scalar_text(tag.value) {
            Ok(None) => Some((None, None)),
            Ok(Some(text)) => Some(match text.split_once('@') {
                Some((tag, digest)) => (
                    Some(tag.to_string()).filter(|t| !t.is_empty()),
                    Some(digest.to_string()),
                ),
                None => (Some(text.to_string()), None),
            }),
            Err(reason) => {
                let origin = self.origin(join(path, tag.key_name), HelmWrite::TagSuffix);
                self.out.skip(tag.value, reason, origin);
                None
            }
        }
    }

    /// The digest of a `digest`/`sha` key (a bare `sha` is sha256's); `None` when it cannot
    /// be read, the image then skipped with the reason.
    fn read_digest_key(&mut self, entry: Option<&Entry<'_>>, path: &str) -> Option<Option<String>> {
        let Some(entry) = entry else {
            return Some(None);
        };
        match scalar_text(entry.value) {
            Ok(None) => Some(None),
            Ok(Some(text)) if entry.key_name == "sha" && !text.contains(':') => {
                Some(Some(format!("sha256:{text}")))
            }
            Ok(Some(text)) => Some(Some(text.to_string())),
            Err(reason) => {
                let origin = self.origin(join(path, entry.key_name), HelmWrite::DigestKey);
                self.out.skip(entry.value, reason, origin);
                None
            }
        }
    }

    /// Where the digest goes (how it is written, its target) and where a moved tag goes, or
    /// the node and reason it cannot be written; `None` with neither a tag nor a digest key.
    fn place<'n>(
        &self,
        digest_key: Option<&Entry<'n>>,
        tag: Option<&Entry<'n>>,
        has_tag_text: bool,
        tag_has_digest: bool,
        insert: Insertion,
    ) -> Option<Placed<'n>> {
        let placed = match (digest_key, tag) {
            (Some(entry), _) => {
                let write = if entry.key_name == "sha" {
                    HelmWrite::ShaKey
                } else {
                    HelmWrite::DigestKey
                };
                let tag_target = match &tag {
                    Some(tag) if has_tag_text => Some(self.writable(tag)),
                    _ => None,
                };
                match (self.writable(entry), tag_target.transpose()) {
                    (Ok(target), Ok(tag_target)) => Ok((write, target, tag_target)),
                    (Err(why), _) => Err((entry.value, why)),
                    (_, Err(why)) => Err((tag.map_or(entry.value, |t| t.value), why)),
                }
            }
            (None, Some(tag))
                if tag_has_digest
                    || self.context.digest == DigestMode::Tag
                    || matches!(insert, Insertion::TagOnly) =>
            {
                self.writable(tag)
                    .map(|target| (HelmWrite::TagSuffix, target, None))
                    .map_err(|why| (tag.value, why))
            }
            (None, Some(tag)) => match self.writable(tag) {
                Ok(tag_target) => {
                    let place = match insert {
                        Insertion::AfterTag { flow } => insertion(self.document, tag, flow),
                        Insertion::At(place) => place,
                        Insertion::TagOnly => None,
                    };
                    match place {
                        Some(target) => Ok((HelmWrite::InsertDigest, target, Some(tag_target))),
                        None => Err((tag.value, SkipReason::HelmNoPlaceForDigest)),
                    }
                }
                Err(why) => Err((tag.value, why)),
            },
            // Without a tag there is no digest written into one, and without a digest key
            // either the image was skipped above.
            (None, None) => return None,
        };
        Some(placed)
    }

    /// The target replacing an entry's value, or why it may not be written.
    fn writable(&self, entry: &Entry<'_>) -> Result<Target, SkipReason> {
        if !entry.editable {
            return Err(SkipReason::HelmSharedValue);
        }
        replace_target(entry.value)
    }
}

/// A scalar's text: `None` when empty or null, an error for a block scalar or a collection.
fn scalar_text<'n>(node: &'n Node<'_>) -> Result<Option<&'n str>, SkipReason> {
    match &node.kind {
        NodeKind::Scalar { style, .. } if is_block(*style) => Err(SkipReason::BlockScalar),
        NodeKind::Scalar { value, style } => {
            let null = *style == Style::Plain && is_null(value);
            Ok(Some(value.as_ref()).filter(|v| !v.is_empty() && !null))
        }
        _ => Err(SkipReason::NotAString),
    }
}

/// A scalar that can be replaced in place, even an empty quoted one (`digest: ""`) or a null
/// (`digest: ~`). A plain value with no text at all (`digest:`) has no bytes to replace.
fn replace_target(node: &Node) -> Result<Target, SkipReason> {
    let NodeKind::Scalar { style, .. } = &node.kind else {
        return Err(SkipReason::NotAString);
    };
    let style = inline_style(*style)?;
    if node.span.is_empty() {
        return Err(SkipReason::HelmEmptyDigest);
    }
    Ok(Target::Scalar {
        span: node.span.clone(),
        style,
    })
}

fn is_flow(node: &Node) -> bool {
    matches!(node.kind, NodeKind::Mapping { flow: true, .. })
}

/// Where a `digest:` key goes in a block without one: on a new line after the tag's, at the
/// tag key's indentation; in a flow mapping, right after the tag's value.
fn insertion(document: &Document<'_>, tag: &Entry<'_>, flow: bool) -> Option<Target> {
    if tag.value.span.is_empty() {
        return None;
    }
    if flow {
        return Some(Target::InsertKustomizeDigest {
            at: tag.value.span.end,
            indent: String::new(),
            flow: true,
        });
    }
    let text = document.text();
    // The key must start its line's content (after indentation and `- `), or the new line's
    // indentation would not line up with it.
    let line_start = text[..tag.key.span.start]
        .rfind('\n')
        .map_or(0, |newline| newline + 1);
    let lead = &text[line_start..tag.key.span.start];
    if !lead.chars().all(|c| c == ' ' || c == '-') {
        return None;
    }
    Some(Target::InsertKustomizeDigest {
        at: line_end(text, tag.value.span.end),
        indent: " ".repeat(lead.chars().count()),
        flow: false,
    })
}

/// Collects the images an Argo CD source's `helm.parameters` set: a `<path>.tag` (or
/// `.version`) parameter, with the repository, registry and digest from parameters of the same
/// path or else from the source's `valuesObject` (`values`), and `image`-named parameters
/// holding a whole reference. Without a `<path>.digest`
/// parameter, the digest is written into the tag (`helm.digest: tag`) or a `<path>.digest`
/// parameter is added after the tag's (`helm.digest: key`).
pub(super) fn scan_parameters(
    document: &Document<'_>,
    list: NodeId,
    values: Option<NodeId>,
    context: &Context,
    out: &mut Collector,
) -> Result<(), ManifestError> {
    let shared = document.alias_targets();
    let (parameters, items) = own_parameters(document, list)?;
    // Argo CD applies parameters in order: the last one of a name wins.
    let find = |name: &str| parameters.iter().rev().find(|(n, _, _)| *n == name);
    // Helm reads a `--set` value of `null` as null, however it is quoted in the Application.
    let text_of = |name: &str| {
        find(name)
            .and_then(|&(_, _, value)| document.scalar(value))
            .filter(|(value, style)| !is_null(value) && !is_block(*style))
            .map(|(value, _)| value.to_string())
    };
    // A parameter, else the Application's values.
    let lookup = |prefix: &str, key: &str| -> Result<Option<String>, ManifestError> {
        match text_of(&join(prefix, key)) {
            Some(text) => Ok(Some(text)),
            None => value_at(document, values, prefix, key),
        }
    };
    let global_registry = lookup("global", "imageRegistry")?;
    let entry = |key_name: &'static str, key: NodeId, value: NodeId| {
        let resolved = document.resolve(value);
        Some(Entry {
            key_name,
            key: document.node(key)?,
            value: document.node(resolved)?,
            editable: resolved == value && !shared.contains(&value),
        })
    };
    let mut walker = Walker {
        document,
        context,
        out,
        visited: HashSet::new(),
        shared: shared.clone(),
        merged: document.merge_sources(),
        global_registry: global_registry.clone(),
    };
    for (&(name, key, value), &item) in parameters.iter().zip(&items) {
        if find(name).map(|&(_, k, _)| k) != Some(key) {
            // A later parameter of the same name overrides this one.
            continue;
        }
        let Some(value_node) = document.node(document.resolve(value)) else {
            continue;
        };
        let (prefix, last) = name.rsplit_once('.').unwrap_or(("", name));
        if is_image_key(last) {
            walker.string_image(value_node, name, None)?;
            continue;
        }
        let key_name = match last {
            "tag" => "tag",
            "version" => "version",
            _ => continue,
        };
        if prefix.is_empty() {
            continue;
        }
        let Some(repository) = lookup(prefix, "repository")? else {
            let origin = walker.origin(name.to_string(), HelmWrite::TagSuffix);
            walker.out.skip(
                value_node,
                SkipReason::HelmParameterWithoutRepository,
                origin,
            );
            continue;
        };
        let registry = match &global_registry {
            Some(global) => Some(global.clone()),
            None => lookup(prefix, "registry")?,
        };
        let digest =
            [("digest", "digest"), ("sha", "sha")]
                .into_iter()
                .find_map(|(suffix, key_name)| {
                    let &(_, k, v) = find(&join(prefix, suffix))?;
                    entry(key_name, k, v)
                });
        let parts = Parts {
            repository,
            registry,
            tag: entry(key_name, key, value),
            digest,
            at: value_node,
            insert: Insertion::At(new_parameter(document, list, item, &join(prefix, "digest"))),
        };
        walker.report(parts, prefix);
    }
    Ok(())
}

/// The parameters of `list` that carry their own `value` (not one merged in), in order, as
/// `(name, value key, value)`, with the item each is.
type Parameters<'d> = (Vec<(&'d str, NodeId, NodeId)>, Vec<NodeId>);

fn own_parameters<'d>(
    document: &'d Document<'_>,
    list: NodeId,
) -> Result<Parameters<'d>, ManifestError> {
    let (mut parameters, mut items) = (Vec::new(), Vec::new());
    for &item in document.items(list) {
        let Some(name) = document.get_str(item, "name")? else {
            continue;
        };
        if let Some((key, value)) = document.get_entry(item, "value")? {
            let own = document
                .entries(item)
                .iter()
                .any(|&(k, v)| k == key && v == value);
            if own {
                parameters.push((name, key, value));
                items.push(item);
            }
        }
    }
    Ok((parameters, items))
}

/// The text at `path.key` of the Application's values, where it has them.
fn value_at(
    document: &Document<'_>,
    values: Option<NodeId>,
    path: &str,
    key: &str,
) -> Result<Option<String>, ManifestError> {
    let Some(values) = values else {
        return Ok(None);
    };
    let keys: Vec<&str> = path.split('.').chain([key]).collect();
    Ok(document
        .get_path(values, &keys)?
        .and_then(|node| set_text(document, node))
        .map(str::to_string))
}

/// Where a new parameter `name` goes after the parameter `item` of the block sequence `list`:
/// after the item's last line, its dash at the item's dash. `None` for a flow sequence, or an
/// item whose line does not start with its dash.
fn new_parameter(
    document: &Document<'_>,
    list: NodeId,
    item: NodeId,
    name: &str,
) -> Option<Target> {
    let text = document.text();
    let list = document.node(document.resolve(list))?;
    if text.as_bytes().get(list.span.start) == Some(&b'[') {
        return None;
    }
    let item = document.node(item)?;
    if item.span.is_empty() {
        return None;
    }
    let line_start = text[..item.span.start].rfind('\n').map_or(0, |n| n + 1);
    let lead = &text[line_start..item.span.start];
    let indent = lead.trim_end_matches(' ').strip_suffix('-')?;
    if !indent.bytes().all(|b| b == b' ') {
        return None;
    }
    Some(Target::InsertHelmParameter {
        at: line_end(text, item.span.end),
        indent: indent.to_string(),
        name: name.to_string(),
    })
}

/// The image a block's parts make, as its chart joins them (`registry/repository:tag@digest`),
/// and its repository's canonical name.
fn image_text(
    registry: Option<&str>,
    repository: &str,
    tag: Option<&str>,
    digest: Option<&str>,
) -> (String, String) {
    let mut value = match registry {
        Some(registry) => format!("{}/{repository}", registry.trim_end_matches('/')),
        None => repository.to_string(),
    };
    if let Some(tag) = tag {
        value = format!("{value}:{tag}");
    }
    if let Some(digest) = digest {
        value = format!("{value}@{digest}");
    }
    let normalized = Reference::parse(&value)
        .map(|r| r.canonical_name())
        .unwrap_or_else(|_| value.clone());
    (value, normalized)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::super::helm::HelmOptions;
    use super::super::scan::{scan_with_options, ScanOutcome};
    use super::*;
    use crate::plan::{self, ScannedFile, Wanted};
    use crate::reference::Digest;

    const D: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const OLD: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn scan_as(path: &str, text: &str, mode: DigestMode) -> ScanOutcome {
        let options = HelmOptions::new(&[], mode).unwrap();
        scan_with_options(Path::new(path), text.as_bytes(), &options)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    fn scan(text: &str) -> ScanOutcome {
        scan_as("values.yaml", text, DigestMode::Tag)
    }

    fn helm(field: &ImageField) -> &HelmImage {
        match &field.origin {
            Origin::HelmImage(image) => image,
            other => panic!("not a Helm image: {other:?}"),
        }
    }

    /// The key path and value of each image found.
    fn images(outcome: &ScanOutcome) -> Vec<(&str, &str)> {
        outcome
            .fields
            .iter()
            .map(|f| (helm(f).key_path.as_str(), f.value.as_str()))
            .collect()
    }

    /// Why each skipped value was skipped, in order.
    fn reasons(outcome: &ScanOutcome) -> Vec<SkipReason> {
        outcome.skipped.iter().map(|s| s.reason).collect()
    }

    /// The first image found, asserted to read as `value` at `at` (line, column), under
    /// `key_path`, of `repository`.
    #[track_caller]
    fn first_image<'o>(
        outcome: &'o ScanOutcome,
        value: &str,
        at: (usize, usize),
        key_path: &str,
        repository: &str,
    ) -> &'o HelmImage {
        let field = &outcome.fields[0];
        assert_eq!(field.value, value);
        assert_eq!((field.line, field.column), at);
        let image = helm(field);
        assert_eq!(image.key_path, key_path);
        assert_eq!(image.repository, repository);
        image
    }

    /// `text` has no image to write, only `shared` values skipped as shared, and pinning
    /// leaves it as it is.
    #[track_caller]
    fn assert_only_shared(text: &str, shared: usize) {
        let outcome = scan(text);
        assert!(outcome.fields.is_empty(), "{:?}", outcome.fields);
        assert_eq!(reasons(&outcome), vec![SkipReason::HelmSharedValue; shared]);
        assert_eq!(pin(text), text);
    }

    /// Pins every image of `text` (a file at `path`) to `D`, keeping tags, or moving them to
    /// `tag` when given: what `sync` would write.
    fn pin_as(path: &str, text: &str, mode: DigestMode, tag: Option<&str>) -> String {
        let outcome = scan_as(path, text, mode);
        let files = [ScannedFile {
            path: PathBuf::from(path),
            source: text.as_bytes().to_vec(),
            fields: outcome.fields,
        }];
        let plan = plan::plan_by(&files, |reference| Wanted::To {
            reference: match tag {
                Some(tag) => reference.retagged(tag),
                None => reference.clone(),
            },
            digest: Digest::parse(D).unwrap(),
        });
        assert!(plan.problems.is_empty(), "{:?}", plan.problems);
        match plan.files.first() {
            Some(file) => String::from_utf8(file.updated.clone()).unwrap(),
            None => text.to_string(),
        }
    }

    fn pin(text: &str) -> String {
        pin_as("values.yaml", text, DigestMode::Tag, None)
    }

    /// Pinning twice changes nothing the second time.
    fn assert_idempotent(path: &str, text: &str, mode: DigestMode) {
        let once = pin_as(path, text, mode, None);
        assert_eq!(pin_as(path, &once, mode, None), once);
    }

    #[test]
    fn a_block_with_a_digest_key_gets_the_digest_there_and_keeps_its_tag() {
        let text = "image:\n  registry: docker.io\n  repository: bitnami/nginx\n  tag: 1.27.3-debian-12-r5\n  digest: \"\"\n  pullPolicy: IfNotPresent\n";
        let outcome = scan(text);
        let image = first_image(
            &outcome,
            "docker.io/bitnami/nginx:1.27.3-debian-12-r5",
            (4, 8),
            "image.tag",
            "docker.io/bitnami/nginx",
        );
        assert_eq!(image.tag.as_deref(), Some("1.27.3-debian-12-r5"));
        assert_eq!(image.write, HelmWrite::DigestKey);
        assert_eq!(
            image.source,
            HelmSource::ValuesFile {
                path: PathBuf::from("values.yaml")
            }
        );
        assert_eq!(
            pin(text),
            text.replace("digest: \"\"", &format!("digest: \"{D}\""))
        );
        assert_idempotent("values.yaml", text, DigestMode::Tag);
    }

    #[test]
    fn a_sha_key_takes_the_hex_without_its_prefix() {
        let text = "image:\n  repository: grafana/grafana\n  tag: \"11.4.0\"\n  sha: \"\"\n";
        let hex = D.trim_start_matches("sha256:");
        assert_eq!(
            pin(text),
            text.replace("sha: \"\"", &format!("sha: \"{hex}\""))
        );
        let pinned = pin(text);
        let image = scan(&pinned).fields.remove(0);
        assert_eq!(helm(&image).digest.as_deref(), Some(D));
        assert_eq!(helm(&image).write, HelmWrite::ShaKey);
        assert_idempotent("values.yaml", text, DigestMode::Tag);
    }

    #[test]
    fn without_a_digest_key_the_default_writes_the_digest_into_the_tag_keeping_its_quotes() {
        let text = "controller:\n  image:\n    repository: quay.io/argoproj/argocd # pinned by tagpin\n    tag: \"v2.13.2\"\n";
        let pinned = pin(text);
        assert_eq!(
            pinned,
            text.replace("\"v2.13.2\"", &format!("\"v2.13.2@{D}\""))
        );
        let field = scan(&pinned).fields.remove(0);
        assert_eq!(helm(&field).key_path, "controller.image.tag");
        assert_eq!(helm(&field).tag.as_deref(), Some("v2.13.2"));
        assert_eq!(helm(&field).digest.as_deref(), Some(D));
        assert_idempotent("values.yaml", text, DigestMode::Tag);
        // Plain stays plain.
        let plain = "image:\n  repository: nginx\n  tag: 1.27.3\n";
        assert_eq!(pin(plain), plain.replace("1.27.3", &format!("1.27.3@{D}")));
    }

    #[test]
    fn key_mode_adds_a_digest_line_after_the_tag_at_its_indentation() {
        let text = "sidecars:\n- name: reloader\n  image:\n    repository: ghcr.io/acme/reloader\n    tag: '2.1' # keep\n    pullPolicy: Always\n- image: {repository: busybox, tag: \"1.36\"}\n";
        let pinned = pin_as("values.yaml", text, DigestMode::Key, None);
        assert_eq!(
            pinned,
            format!("sidecars:\n- name: reloader\n  image:\n    repository: ghcr.io/acme/reloader\n    tag: '2.1' # keep\n    digest: {D}\n    pullPolicy: Always\n- image: {{repository: busybox, tag: \"1.36\", digest: {D}}}\n")
        );
        let paths: Vec<String> = scan(&pinned)
            .fields
            .iter()
            .map(|f| helm(f).key_path.clone())
            .collect();
        assert_eq!(paths, ["sidecars[0].image.tag", "sidecars[1].image.tag"]);
        assert_idempotent("values.yaml", text, DigestMode::Key);
    }

    #[test]
    fn key_mode_keeps_crlf_line_endings_and_a_byte_order_mark() {
        let text = "\u{feff}image:\r\n  repository: nginx\r\n  tag: \"1.27\"\r\n";
        let pinned = pin_as("values.yaml", text, DigestMode::Key, None);
        assert_eq!(
            pinned,
            format!(
                "\u{feff}image:\r\n  repository: nginx\r\n  tag: \"1.27\"\r\n  digest: {D}\r\n"
            )
        );
    }

    #[test]
    fn a_digest_without_a_tag_is_found_as_digest_only_and_carried() {
        let text = format!("image:\n  repository: ghcr.io/acme/web\n  digest: {OLD}\n");
        let field = scan(&text).fields.remove(0);
        assert_eq!(field.value, format!("ghcr.io/acme/web@{OLD}"));
        assert_eq!(helm(&field).key_path, "image.digest");
        assert_eq!(helm(&field).tag, None);
        // A promotion carries a digest into it.
        assert_eq!(pin(&text), text.replace(OLD, D));
    }

    #[test]
    fn global_image_registry_applies_to_every_block_as_chart_templates_do() {
        let text = "global:\n  imageRegistry: mirror.example.com\nimage:\n  repository: bitnami/redis\n  tag: 7.4.1\nmetrics:\n  image:\n    registry: docker.io\n    repository: bitnami/redis-exporter\n    tag: 1.66.0\n";
        let values: Vec<String> = scan(text).fields.into_iter().map(|f| f.value).collect();
        assert_eq!(
            values,
            [
                "mirror.example.com/bitnami/redis:7.4.1",
                "mirror.example.com/bitnami/redis-exporter:1.66.0"
            ]
        );
    }

    #[test]
    fn yaml_null_is_not_set_in_registries_tags_and_digests() {
        // grafana's values: `global.imageRegistry: null` must not become a registry `null`.
        let text = "global:\n  imageRegistry: null\ntestFramework:\n  image:\n    registry: docker.io\n    repository: bats/bats\n    tag: \"v1.4.1\"\nsidecar:\n  image:\n    registry: ~\n    repository: kiwigrid/k8s-sidecar\n    tag: 1.28.0\n    sha: \"\"\nother:\n  image:\n    registry:\n    repository: acme/other\n    tag: 2.0\n    digest: null\nchart:\n  image:\n    registry: null\n    repository: acme/chart\n    tag: null\n";
        let outcome = scan(text);
        let values: Vec<&str> = outcome.fields.iter().map(|f| f.value.as_str()).collect();
        assert_eq!(
            values,
            [
                "docker.io/bats/bats:v1.4.1",
                "kiwigrid/k8s-sidecar:1.28.0",
                "acme/other:2.0"
            ]
        );
        let writes: Vec<HelmWrite> = outcome.fields.iter().map(|f| helm(f).write).collect();
        assert_eq!(
            writes,
            [
                HelmWrite::TagSuffix,
                HelmWrite::ShaKey,
                HelmWrite::DigestKey
            ]
        );
        assert_eq!(helm(&outcome.fields[2]).digest, None);
        let skipped: Vec<(usize, SkipReason)> =
            outcome.skipped.iter().map(|s| (s.line, s.reason)).collect();
        assert_eq!(skipped, [(24, SkipReason::HelmTagFromChart)]);
        let hex = D.trim_start_matches("sha256:");
        assert_eq!(
            pin(text),
            text.replace("\"v1.4.1\"", &format!("\"v1.4.1@{D}\""))
                .replace("sha: \"\"", &format!("sha: \"{hex}\""))
                .replace("digest: null", &format!("digest: {D}"))
        );
        assert_idempotent("values.yaml", text, DigestMode::Tag);
        // `~` and an empty value are null too; a quoted "null" is the string it says.
        for global in ["~", "", "''"] {
            let text = text.replace("imageRegistry: null", &format!("imageRegistry: {global}"));
            assert_eq!(
                scan(&text).fields[0].value,
                "docker.io/bats/bats:v1.4.1",
                "{global:?}"
            );
        }
    }

    #[test]
    fn a_global_registry_replaces_each_block_s_own_as_bitnami_s_common_images_image_does() {
        // `default .imageRoot.registry .global.imageRegistry`: the global one when set.
        let block = "image:\n  registry: docker.io\n  repository: bitnami/redis\n  tag: 7.4.1\n  digest: \"\"\n";
        for (global, want) in [
            (
                "mirror.example.com",
                "mirror.example.com/bitnami/redis:7.4.1",
            ),
            ("\"\"", "docker.io/bitnami/redis:7.4.1"),
            ("null", "docker.io/bitnami/redis:7.4.1"),
        ] {
            let text = format!("global:\n  imageRegistry: {global}\n{block}");
            assert_eq!(scan(&text).fields[0].value, want, "{global}");
        }
        // In Argo CD parameters, Helm reads a `null` value as null, quoted or not.
        let application = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: web}\nspec:\n  source:\n    helm:\n      parameters:\n      - {name: global.imageRegistry, value: 'null'}\n      - {name: image.registry, value: docker.io}\n      - {name: image.repository, value: bitnami/redis}\n      - {name: image.tag, value: '7.4.1'}\n";
        let outcome = scan_as("app.yaml", application, DigestMode::Tag);
        assert_eq!(outcome.fields[0].value, "docker.io/bitnami/redis:7.4.1");
    }

    #[test]
    fn an_untagged_image_beside_a_tag_is_one_image_whose_tag_takes_the_digest() {
        // argo-helm's redis-ha exporter; the chart renders `{{ .image }}:{{ .tag }}`.
        let text = "redis-ha:\n  exporter:\n    enabled: false\n    # -- Repository to use for the redis-exporter\n    image: ghcr.io/oliver006/redis_exporter\n    # -- Tag to use for the redis-exporter\n    tag: v1.75.0\n";
        for mode in [DigestMode::Tag, DigestMode::Key] {
            let outcome = scan_as("values.yaml", text, mode);
            assert!(outcome.skipped.is_empty(), "{:?}", outcome.skipped);
            let image = first_image(
                &outcome,
                "ghcr.io/oliver006/redis_exporter:v1.75.0",
                (7, 10),
                "redis-ha.exporter.tag",
                "ghcr.io/oliver006/redis_exporter",
            );
            assert_eq!(image.write, HelmWrite::TagSuffix);
            // The image line stays as it is: the chart appends the tag to it.
            assert_eq!(
                pin_as("values.yaml", text, mode, None),
                text.replace("tag: v1.75.0", &format!("tag: v1.75.0@{D}"))
            );
            assert_idempotent("values.yaml", text, mode);
        }
        // A tag policy moves the tag and the digest together, in the tag.
        assert_eq!(
            pin_as("values.yaml", text, DigestMode::Tag, Some("v1.76.0")),
            text.replace("tag: v1.75.0", &format!("tag: v1.76.0@{D}"))
        );
    }

    #[test]
    fn an_untagged_image_alone_or_composed_by_the_chart_is_skipped_with_the_reason() {
        let text = "a:\n  image: ghcr.io/acme/tool\nb:\n  configReloaderImage: quay.io/acme/reloader\n# ingress-nginx: registry/image:tag@digest, as its chart composes them\nc:\n  image:\n    registry: registry.k8s.io\n    image: ingress-nginx/controller\n    tag: \"v1.12.1\"\n    digest: sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\nd:\n  image: busybox\n  tag: \"\"\n";
        let outcome = scan(text);
        assert!(outcome.fields.is_empty(), "{:?}", outcome.fields);
        let skipped: Vec<(usize, SkipReason)> =
            outcome.skipped.iter().map(|s| (s.line, s.reason)).collect();
        assert_eq!(
            skipped,
            [
                (2, SkipReason::HelmImageWithoutTag),
                (4, SkipReason::HelmImageWithoutTag),
                (9, SkipReason::HelmImageComposed),
                (14, SkipReason::HelmTagFromChart),
            ]
        );
        assert_eq!(pin(text), text);
        // A whole reference is pinned as it always was.
        let tagged = "a:\n  image: ghcr.io/acme/tool:1.2\n  tag: ignored\n";
        assert_eq!(scan(tagged).fields[0].value, "ghcr.io/acme/tool:1.2");
    }

    #[test]
    fn strings_and_star_image_keys_at_any_depth_are_images() {
        let text = "prometheus:\n  configReloaderImage: quay.io/prometheus-operator/prometheus-config-reloader:v0.79.2\n  useDefaultImage: true\n  initContainers:\n  - name: init\n    image: \"busybox:1.36\"\n";
        let outcome = scan(text);
        let fields = images(&outcome);
        assert_eq!(
            fields,
            [
                (
                    "prometheus.configReloaderImage",
                    "quay.io/prometheus-operator/prometheus-config-reloader:v0.79.2"
                ),
                ("prometheus.initContainers[0].image", "busybox:1.36")
            ]
        );
        assert_eq!(outcome.skipped[0].reason, SkipReason::NotAString);
        assert_eq!(
            pin(text),
            text.replace("v0.79.2", &format!("v0.79.2@{D}"))
                .replace("busybox:1.36", &format!("busybox:1.36@{D}"))
        );
    }

    #[test]
    fn a_block_under_any_key_is_an_image_when_it_is_unmistakably_one() {
        let text = "redis:\n  enabled: false\n  repository: redis\n  tag: 7.0.7\nchart:\n  repository: https://charts.example.com\n  version: 1.2.3\nbackup:\n  repository: acme/backup\n";
        let outcome = scan(text);
        let found = images(&outcome);
        assert_eq!(found, [("redis.tag", "redis:7.0.7")]);
        assert!(outcome.skipped.is_empty());
    }

    #[test]
    fn a_tag_left_to_the_chart_is_skipped_with_the_reason() {
        let text = "image:\n  repository: quay.io/prometheus/node-exporter\n  tag: \"\"\n  digest: \"\"\nother:\n  image:\n    repository: \"\"\n    tag: \"\"\n";
        let outcome = scan(text);
        assert!(outcome.fields.is_empty());
        let skipped: Vec<(usize, SkipReason)> =
            outcome.skipped.iter().map(|s| (s.line, s.reason)).collect();
        assert_eq!(
            skipped,
            [
                (3, SkipReason::HelmTagFromChart),
                (7, SkipReason::HelmNoRepository)
            ]
        );
        assert!(SkipReason::HelmTagFromChart
            .to_string()
            .contains("appVersion"));
    }

    #[test]
    fn values_shared_through_anchors_and_merges_are_never_written() {
        let text = "defaults: &defaults\n  tag: \"1.0\"\na:\n  image:\n    <<: *defaults\n    repository: acme/a\nb:\n  image:\n    repository: acme/b\n    tag: &t \"2.0\"\nc:\n  image:\n    repository: acme/c\n    tag: *t\n";
        assert_only_shared(text, 3);
    }

    #[test]
    fn a_block_merged_into_another_is_not_written_either() {
        let text = "a:\n  image: &base\n    repository: acme/a\n    tag: \"1\"\nb:\n  image:\n    <<: *base\n    repository: acme/b\n";
        assert_only_shared(text, 2);
    }

    #[test]
    fn an_aliased_image_block_is_one_field() {
        let text = "web:\n  image: &img\n    repository: acme/web\n    tag: \"1.0\"\nworker:\n  image: *img\n";
        let outcome = scan(text);
        assert_eq!(outcome.fields.len(), 1);
        assert_eq!(helm(&outcome.fields[0]).key_path, "web.image.tag");
    }

    #[test]
    fn a_tag_and_a_digest_key_that_disagree_are_skipped() {
        let text = format!("image:\n  repository: acme/web\n  tag: 1.0.1@{OLD}\n  digest: {D}\n");
        let outcome = scan(&text);
        assert!(outcome.fields.is_empty());
        assert_eq!(outcome.skipped[0].reason, SkipReason::HelmTwoDigests);
    }

    #[test]
    fn a_tag_policy_moves_the_tag_and_the_digest_together() {
        let text = "image:\n  repository: acme/web\n  tag: 1.4.2\n  digest: \"\"\n";
        assert_eq!(
            pin_as("values.yaml", text, DigestMode::Tag, Some("1.4.3")),
            format!("image:\n  repository: acme/web\n  tag: 1.4.3\n  digest: \"{D}\"\n")
        );
        let key = "image:\n  repository: acme/web\n  tag: \"1.4.2\"\n";
        assert_eq!(
            pin_as("values.yaml", key, DigestMode::Key, Some("1.4.3")),
            format!("image:\n  repository: acme/web\n  tag: \"1.4.3\"\n  digest: {D}\n")
        );
        assert_eq!(
            pin_as("values.yaml", key, DigestMode::Tag, Some("1.4.3")),
            format!("image:\n  repository: acme/web\n  tag: \"1.4.3@{D}\"\n")
        );
    }

    #[test]
    fn only_the_first_document_of_a_values_file_is_values() {
        let text = "image: {repository: a, tag: \"1\"}\n---\nimage: {repository: b, tag: \"2\"}\n";
        let outcome = scan(text);
        assert_eq!(outcome.fields.len(), 1);
        assert_eq!(outcome.kubernetes_documents, 1);
    }

    #[test]
    fn other_yaml_files_are_not_values() {
        let outcome = scan_as(
            "config.yaml",
            "image: {repository: a, tag: \"1\"}\n",
            DigestMode::Tag,
        );
        assert!(outcome.fields.is_empty());
        assert_eq!(outcome.kubernetes_documents, 0);
    }

    const HELM_RELEASE: &str = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: podinfo\n  namespace: flux-system\nspec:\n  chart:\n    spec: {chart: podinfo, version: 6.7.1}\n  values:\n    image:\n      repository: ghcr.io/stefanprodan/podinfo\n      tag: 6.7.1\n";

    #[test]
    fn a_helm_release_s_values_are_scanned_with_its_name() {
        let outcome = scan_as("apps/podinfo.yaml", HELM_RELEASE, DigestMode::Tag);
        assert_eq!(outcome.kubernetes_documents, 1);
        let field = &outcome.fields[0];
        assert_eq!(field.line, 12);
        let image = helm(field);
        assert_eq!(image.key_path, "image.tag");
        assert_eq!(
            image.source,
            HelmSource::HelmRelease {
                namespace: Some("flux-system".into()),
                name: "podinfo".into(),
                document: 0
            }
        );
        assert_eq!(
            pin_as("apps/podinfo.yaml", HELM_RELEASE, DigestMode::Tag, None),
            HELM_RELEASE.replace("tag: 6.7.1", &format!("tag: 6.7.1@{D}"))
        );
    }

    const APPLICATION: &str = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: argocd\nspec:\n  sources:\n  - repoURL: https://charts.example.com\n    chart: web\n    helm:\n      valuesObject:\n        image:\n          repository: ghcr.io/acme/web\n      parameters:\n      - name: image.tag\n        value: \"1.4.2\"\n      - name: worker.image.repository\n        value: ghcr.io/acme/worker\n      - name: worker.image.tag\n        value: \"3.0\"\n      - name: worker.image.digest\n        value: \"\"\n      - name: lonely.image.tag\n        value: \"9\"\n  - repoURL: https://git.example.com/acme/config\n    path: web\n    helm:\n      values: |\n        # the API's image\n        api:\n          image:\n            repository: ghcr.io/acme/api\n            tag: \"2.0\"\n";

    #[test]
    fn application_parameters_find_their_repository_in_parameters_or_values_object() {
        let outcome = scan_as("apps/web.yaml", APPLICATION, DigestMode::Tag);
        let found: Vec<(&str, &str, HelmPart)> = outcome
            .fields
            .iter()
            .map(|f| (helm(f).key_path.as_str(), f.value.as_str(), helm(f).part))
            .collect();
        assert_eq!(
            found,
            [
                ("image.tag", "ghcr.io/acme/web:1.4.2", HelmPart::Parameters),
                (
                    "worker.image.tag",
                    "ghcr.io/acme/worker:3.0",
                    HelmPart::Parameters
                ),
                (
                    "api.image.tag",
                    "ghcr.io/acme/api:2.0",
                    HelmPart::ValuesText
                ),
            ]
        );
        assert_eq!(outcome.skipped.len(), 1);
        assert_eq!(
            outcome.skipped[0].reason,
            SkipReason::HelmParameterWithoutRepository
        );
        assert_eq!(outcome.skipped[0].line, 24);
        let source = |f: &ImageField| helm(f).source.clone();
        assert_eq!(
            source(&outcome.fields[2]),
            HelmSource::Application {
                namespace: Some("argocd".into()),
                name: "web".into(),
                source: Some(1),
                document: 0
            }
        );
        // The block-scalar image is placed in the file.
        assert_eq!((outcome.fields[2].line, outcome.fields[2].column), (33, 18));
    }

    #[test]
    fn application_parameters_and_values_text_are_pinned_in_place() {
        let pinned = pin_as("apps/web.yaml", APPLICATION, DigestMode::Key, None);
        let expected = APPLICATION
            .replace(
                "value: \"1.4.2\"\n",
                &format!("value: \"1.4.2\"\n      - name: image.digest\n        value: {D}\n"),
            )
            .replace("value: \"\"", &format!("value: \"{D}\""))
            .replace(
                "            tag: \"2.0\"\n",
                &format!("            tag: \"2.0\"\n            digest: {D}\n"),
            );
        assert_eq!(pinned, expected);
        assert_idempotent("apps/web.yaml", APPLICATION, DigestMode::Key);
        // The edited text still parses as the values Argo CD reads.
        let value: serde_yaml::Value = serde_yaml::from_str(&pinned).unwrap();
        let text = value["spec"]["sources"][1]["helm"]["values"]
            .as_str()
            .unwrap();
        let inner: serde_yaml::Value = serde_yaml::from_str(text).unwrap();
        assert_eq!(inner["api"]["image"]["digest"].as_str(), Some(D));
    }

    #[test]
    fn parameters_get_the_digest_in_the_tag_by_default_and_not_in_a_flow_list_under_key_mode() {
        let text = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: web}\nspec:\n  source:\n    helm:\n      parameters:\n      - {name: image.repository, value: nginx}\n      - {name: image.tag, value: '1.27'}\n";
        assert_eq!(
            pin_as("app.yaml", text, DigestMode::Tag, None),
            text.replace("'1.27'", &format!("'1.27@{D}'"))
        );
        let flow = text
            .replace("      - {name: image.repository, value: nginx}\n      - {name: image.tag, value: '1.27'}\n", "        [{name: image.repository, value: nginx}, {name: image.tag, value: '1.27'}]\n");
        let outcome = scan_as("app.yaml", &flow, DigestMode::Key);
        assert!(outcome.fields.is_empty());
        assert_eq!(outcome.skipped[0].reason, SkipReason::HelmNoPlaceForDigest);
        // A block list in key mode takes a new item, flow items or not.
        assert_eq!(
            pin_as("app.yaml", text, DigestMode::Key, None),
            format!("{text}      - name: image.digest\n        value: {D}\n")
        );
        assert_idempotent("app.yaml", text, DigestMode::Key);
    }

    proptest::proptest! {
        /// Whatever a hostile values file or Application holds, scanning never panics, and a
        /// file that scans is pinned into one that still scans, idempotently: never corrupted.
        #[test]
        fn pinning_yaml_like_text_never_corrupts_it(
            noise in "([-:{}\\[\\],&*|>'\"# \r\n\u{feff}]|  |image|repository|tag|digest|sha|registry|global|imageRegistry|parameters|name|value|helm|values|valuesObject|<<|nginx|1\\.2|@sha256:[a]{64}|[a-z0-9]){0,200}",
            pieces in proptest::collection::vec(proptest::sample::select(PIECES.to_vec()), 0..8),
            crlf in proptest::bool::ANY,
            key in proptest::bool::ANY,
        ) {
            let structured = pieces.concat();
            let structured = if crlf { structured.replace('\n', "\r\n") } else { structured };
            for text in [noise, structured] {
            let mode = if key { DigestMode::Key } else { DigestMode::Tag };
            let options = HelmOptions::new(&[], mode).unwrap();
            for (path, text) in [
                ("values.yaml", text.clone()),
                ("app.yaml", format!("apiVersion: argoproj.io/v1alpha1\nkind: Application\nspec:\n  source:\n    helm:\n      values: |\n        {}\n", text.replace('\n', "\n        "))),
            ] {
                let Ok(outcome) = scan_with_options(Path::new(path), text.as_bytes(), &options) else {
                    continue;
                };
                let files = [ScannedFile { path: PathBuf::from(path), source: text.as_bytes().to_vec(), fields: outcome.fields }];
                let plan = plan::plan_by(&files, |reference| Wanted::To {
                    reference: reference.clone(),
                    digest: Digest::parse(D).unwrap(),
                });
                let Some(file) = plan.files.first() else { continue };
                let again = scan_with_options(Path::new(path), &file.updated, &options);
                proptest::prop_assert!(again.is_ok(), "{text:?} became {:?}", String::from_utf8_lossy(&file.updated));
                let files = [ScannedFile { path: PathBuf::from(path), source: file.updated.clone(), fields: again.unwrap().fields }];
                let twice = plan::plan_by(&files, |reference| Wanted::To {
                    reference: reference.clone(),
                    digest: Digest::parse(D).unwrap(),
                });
                proptest::prop_assert!(twice.files.is_empty(), "{text:?}: a second pin changed {:?}", twice.changes);
            }
            }
        }
    }

    /// Top-level pieces of values files, in the shapes charts use; any sequence of them is a
    /// mapping (some with duplicate keys, which are refused).
    const PIECES: [&str; 14] = [
        "image:\n  repository: nginx\n  tag: 1.2\n",
        "a:\n  image:\n    registry: docker.io\n    repository: bitnami/nginx\n    tag: \"1.27.3\" # c\n    digest: \"\"\n",
        "b:\n  image: {repository: busybox, tag: '1.36', sha: ''}\n",
        "c:\n  image: &img\n    repository: acme/c\n    tag: v1\nd:\n  image: *img\n",
        "e:\n  - name: x\n    image: \"redis:7\"\n  - image: redis\n",
        "f: &f {tag: '2'}\ng:\n  image:\n    <<: *f\n    repository: acme/g\n",
        "global:\n  imageRegistry: mirror.example.com\n",
        "h:\n  image:\n    repository: acme/h\n    tag: \"\"\n",
        "i:\n  configReloaderImage: quay.io/x/y:v1 # note\n",
        "j:\n  image:\n    repository: acme/j\n    digest: sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n",
        "k:\n  image:\n    repository: acme/k\n    tag: 1.0@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n",
        "# comment only\n",
        "l:\n  image:\n    repository: acme/l\n    tag: |\n      1.0\n",
        "m: {image: {repository: acme/m, version: \"3\"}}\n",
    ];

    #[test]
    fn a_folded_values_text_is_reported_not_edited() {
        let text = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: web}\nspec:\n  source:\n    helm:\n      values: >\n        image:\n          repository: nginx\n";
        let outcome = scan_as("app.yaml", text, DigestMode::Tag);
        assert!(outcome.fields.is_empty());
        assert_eq!(outcome.skipped[0].reason, SkipReason::HelmValuesText);
        assert_eq!(outcome.skipped[0].line, 8);
        assert_eq!(pin_as("app.yaml", text, DigestMode::Tag, None), text);
    }

    #[test]
    fn a_values_text_with_crlf_line_endings_is_pinned_in_place() {
        let text = "apiVersion: argoproj.io/v1alpha1\r\nkind: Application\r\nmetadata: {name: web}\r\nspec:\r\n  source:\r\n    helm:\r\n      values: |-\r\n        image:\r\n          repository: nginx\r\n          tag: \"1.27\"\r\n";
        let pinned = pin_as("app.yaml", text, DigestMode::Key, None);
        assert_eq!(pinned, format!("{text}          digest: {D}\r\n"));
    }
}
