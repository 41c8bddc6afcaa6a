//! Locating image fields in Kubernetes manifests and kustomization files, with exact byte spans.
//!
//! A rewrite that keeps every other byte of the file needs to know where each image value sits in
//! the file as written, quotes included. This module parses the file into YAML events
//! (`saphyr-parser`), builds a light tree per document (no alias expansion, bounded depth, so a
//! hostile file cannot blow up memory or the stack), and walks the few paths where Kubernetes
//! keeps container images. It does no I/O: the caller reads the file and hands over its bytes.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::Path;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle as YamlStyle, Span};

use super::{ManifestError, MAX_DEPTH, MAX_FILE_BYTES};
use crate::workload::{WorkloadId, WorkloadKind};

/// How a scalar is written in the file; a rewrite keeps it so a diff shows only the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarStyle {
    Plain,
    SingleQuoted,
    DoubleQuoted,
}

/// Which list of a pod spec a container came from; reports name it the way `kubectl` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerList {
    Containers,
    InitContainers,
    EphemeralContainers,
}

impl ContainerList {
    const ALL: [ContainerList; 3] = [
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
    KustomizeImage {
        name: String,
        document: usize,
        current_digest: Option<String>,
    },
}

/// Where a new value goes in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Replace this scalar (a byte range of the file, quotes included), keeping its style.
    Scalar {
        span: Range<usize>,
        style: ScalarStyle,
    },
    /// A kustomize entry without a `digest:` key: insert one. For a block mapping, a new line
    /// `<indent>digest: <value>` goes at byte `at`, which is the end of the entry's last line
    /// (before its line break, so a trailing comment stays where it is). For a flow mapping,
    /// `, digest: <value>` goes at `at`, the end of the entry's last value.
    InsertKustomizeDigest {
        at: usize,
        indent: String,
        flow: bool,
    },
}

impl Target {
    /// The bytes of the original file this target replaces (empty for an insertion).
    pub fn span(&self) -> Range<usize> {
        match self {
            Target::Scalar { span, .. } => span.clone(),
            Target::InsertKustomizeDigest { at, .. } => *at..*at,
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

/// Everything `scan` learned about one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Image fields to pin, in document order, each target listed once (aliases and merge keys
    /// can make several containers share one value; the first one found names it).
    pub fields: Vec<ImageField>,
    pub skipped: Vec<SkippedField>,
    /// YAML documents in the file.
    pub documents: usize,
    /// Documents with `apiVersion` and `kind` (any kind), plus kustomizations. Zero means
    /// "not a Kubernetes manifest", which callers report differently from "no images".
    pub kubernetes_documents: usize,
}

/// Finds the image fields of every document in `source`, the contents of the file at `path`.
///
/// `path` names the file in errors and tells a kustomization file by its name
/// (`kustomization.yaml`, `kustomization.yml`, `Kustomization`). Spans are byte offsets into
/// `source`, including a leading byte order mark if there is one.
pub fn scan(path: &Path, source: &[u8]) -> Result<ScanOutcome, ManifestError> {
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
    let kustomization_file = path
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| {
            matches!(
                name,
                "kustomization.yaml" | "kustomization.yml" | "Kustomization"
            )
        });

    let mut offsets = CharOffsets::new(text);
    let mut collector = Collector::default();
    let mut outcome = ScanOutcome::default();
    let mut document: Option<DocumentBuilder> = None;
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|error| parse_error(path, &error))?;
        match event {
            Event::DocumentStart(_) => document = Some(DocumentBuilder::new(path)),
            Event::DocumentEnd => {
                if let Some(builder) = document.take() {
                    let index = outcome.documents;
                    outcome.documents += 1;
                    let tree = builder.finish();
                    let walker = DocumentWalker {
                        path,
                        text,
                        nodes: &tree.nodes,
                        document: index,
                    };
                    if walker.scan(tree.root, kustomization_file, &mut collector)? {
                        outcome.kubernetes_documents += 1;
                    }
                }
            }
            other => {
                if let Some(builder) = document.as_mut() {
                    builder.event(other, span, text, &mut offsets)?;
                }
            }
        }
    }
    outcome.fields = collector.fields;
    outcome.skipped = collector.skipped;
    Ok(outcome)
}

/// The parser's error, placed in the file. Its flow nesting limit (255, below any stack
/// trouble) is reported like ours, as too deep.
fn parse_error(path: &Path, error: &saphyr_parser::ScanError) -> ManifestError {
    let (line, column) = (error.marker().line(), error.marker().col() + 1);
    if error.info() == "recursion limit exceeded" {
        return ManifestError::TooDeep {
            path: path.to_path_buf(),
            line,
            column,
            limit: MAX_DEPTH,
        };
    }
    ManifestError::InvalidYaml {
        path: path.to_path_buf(),
        line,
        column,
        message: error.info().to_string(),
    }
}

/// Converts the parser's character indices to byte offsets without a table per character
/// (16 MiB of text would need 128 MiB of it): a checkpoint every `STRIDE` characters, plus a
/// cursor, because the parser reports positions almost always in increasing order.
struct CharOffsets<'a> {
    text: &'a str,
    /// Byte offset of every `STRIDE`-th character; `None` when the text is ASCII.
    checkpoints: Option<Vec<usize>>,
    /// Last conversion: (character index, byte offset).
    cursor: (usize, usize),
}

impl<'a> CharOffsets<'a> {
    const STRIDE: usize = 1024;

    fn new(text: &'a str) -> Self {
        let checkpoints = if text.is_ascii() {
            None
        } else {
            Some(
                text.char_indices()
                    .step_by(Self::STRIDE)
                    .map(|(byte, _)| byte)
                    .collect(),
            )
        };
        CharOffsets {
            text,
            checkpoints,
            cursor: (0, 0),
        }
    }

    fn byte(&mut self, char_index: usize) -> usize {
        let len = self.text.len();
        let Some(checkpoints) = &self.checkpoints else {
            return char_index.min(len);
        };
        let checkpoint = char_index / Self::STRIDE;
        let Some(&checkpoint_byte) = checkpoints.get(checkpoint) else {
            return len;
        };
        let mut start = (checkpoint * Self::STRIDE, checkpoint_byte);
        if self.cursor.0 <= char_index && self.cursor.0 > start.0 {
            start = self.cursor;
        }
        let byte = self.text[start.1..]
            .char_indices()
            .nth(char_index - start.0)
            .map_or(len, |(offset, _)| start.1 + offset);
        self.cursor = (char_index, byte);
        byte
    }
}

/// One YAML value of the light tree.
struct Node {
    kind: NodeKind,
    /// Scalars: the value as written, quotes included, tag and anchor excluded. Aliases: the
    /// `*name` token. Collections: from the opening to the end of the last byte of content.
    span: Range<usize>,
    /// 1-based line and column (in characters) of `span.start`.
    line: usize,
    column: usize,
}

enum NodeKind {
    Scalar {
        value: String,
        style: YamlStyle,
    },
    Sequence {
        items: Vec<usize>,
    },
    Mapping {
        entries: Vec<(usize, usize)>,
        flow: bool,
    },
    Alias {
        target: usize,
    },
}

/// A collection whose end event has not arrived yet.
struct Open {
    node: usize,
    /// For a mapping: the key waiting for its value.
    pending_key: Option<usize>,
    flow_context: bool,
}

/// The nodes of one document; aliases point at nodes, so nothing is ever expanded.
struct Tree {
    nodes: Vec<Node>,
    root: Option<usize>,
}

/// Builds a [`Tree`] from parser events, iteratively, refusing depth beyond [`MAX_DEPTH`].
struct DocumentBuilder<'p> {
    path: &'p Path,
    nodes: Vec<Node>,
    /// Parser anchor id to node; anchors are scoped to their document.
    anchors: HashMap<usize, usize>,
    open: Vec<Open>,
    root: Option<usize>,
}

impl<'p> DocumentBuilder<'p> {
    fn new(path: &'p Path) -> Self {
        DocumentBuilder {
            path,
            nodes: Vec::new(),
            anchors: HashMap::new(),
            open: Vec::new(),
            root: None,
        }
    }

    fn finish(self) -> Tree {
        Tree {
            nodes: self.nodes,
            root: self.root,
        }
    }

    fn invalid(&self, marker: Marker, message: &str) -> ManifestError {
        ManifestError::InvalidYaml {
            path: self.path.to_path_buf(),
            line: marker.line(),
            column: marker.col() + 1,
            message: message.to_string(),
        }
    }

    fn event(
        &mut self,
        event: Event<'_>,
        span: Span,
        text: &str,
        offsets: &mut CharOffsets<'_>,
    ) -> Result<(), ManifestError> {
        let start = offsets.byte(span.start.index());
        let end = offsets.byte(span.end.index()).max(start);
        match event {
            Event::Scalar(value, style, anchor, _tag) => {
                let Some(range) = scalar_range(text, start..end, style) else {
                    return Err(self.invalid(span.start, "cannot locate this scalar in the file"));
                };
                let (line, column) = advance(text, span.start, start, range.start);
                let node = self.push(Node {
                    kind: NodeKind::Scalar {
                        value: value.into_owned(),
                        style,
                    },
                    span: range,
                    line,
                    column,
                });
                self.register(anchor, node);
                self.attach(node);
            }
            Event::Alias(anchor) => {
                let Some(&target) = self.anchors.get(&anchor) else {
                    return Err(self.invalid(
                        span.start,
                        "alias refers to an anchor outside this document",
                    ));
                };
                let node = self.push(Node {
                    kind: NodeKind::Alias { target },
                    span: start..end,
                    line: span.start.line(),
                    column: span.start.col() + 1,
                });
                self.attach(node);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.open.len() >= MAX_DEPTH {
                    return Err(ManifestError::TooDeep {
                        path: self.path.to_path_buf(),
                        line: span.start.line(),
                        column: span.start.col() + 1,
                        limit: MAX_DEPTH,
                    });
                }
                let kind = if matches!(event, Event::SequenceStart(..)) {
                    NodeKind::Sequence { items: Vec::new() }
                } else {
                    NodeKind::Mapping {
                        entries: Vec::new(),
                        flow: false,
                    }
                };
                let node = self.push(Node {
                    kind,
                    span: start..end,
                    line: span.start.line(),
                    column: span.start.col() + 1,
                });
                self.register(anchor, node);
                self.attach(node);
                let parent_flow = self.open.last().is_some_and(|open| open.flow_context);
                // A flow collection's start span runs to its bracket; a block one's stops
                // before its first entry.
                let opener = skip_properties(text.as_bytes(), start..end);
                let flow_context = parent_flow
                    || (opener < end && matches!(text.as_bytes().get(opener), Some(b'{' | b'[')));
                self.open.push(Open {
                    node,
                    pending_key: None,
                    flow_context,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(open) = self.open.pop() else {
                    return Err(self.invalid(span.start, "collection end without a start"));
                };
                // A flow collection ends at its closing bracket; a block one with its content.
                let content_end = self.content_end(open.node);
                let closes_flow =
                    end > start && matches!(text.as_bytes().get(start), Some(b'}' | b']'));
                let closing_end = if closes_flow { end } else { content_end };
                if let Some(node) = self.nodes.get_mut(open.node) {
                    node.span.end = closing_end.max(node.span.start);
                    if let NodeKind::Mapping { flow, .. } = &mut node.kind {
                        *flow = open.flow_context;
                    }
                }
            }
            Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd
            | Event::Nothing => {}
        }
        Ok(())
    }

    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn register(&mut self, anchor: usize, node: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, node);
        }
    }

    /// Hangs a finished (or just opened) node on the innermost open collection.
    fn attach(&mut self, child: usize) {
        let Some(open) = self.open.last_mut() else {
            self.root = Some(child);
            return;
        };
        let Some(parent) = self.nodes.get_mut(open.node) else {
            return;
        };
        match &mut parent.kind {
            NodeKind::Sequence { items } => items.push(child),
            NodeKind::Mapping { entries, .. } => match open.pending_key.take() {
                Some(key) => entries.push((key, child)),
                None => open.pending_key = Some(child),
            },
            NodeKind::Scalar { .. } | NodeKind::Alias { .. } => {}
        }
    }

    /// The end of the last content byte of a collection, for block collections whose end
    /// event carries no position of its own.
    fn content_end(&self, node: usize) -> usize {
        let Some(node) = self.nodes.get(node) else {
            return 0;
        };
        let last_child = match &node.kind {
            NodeKind::Sequence { items } => items.last().copied(),
            NodeKind::Mapping { entries, .. } => entries.last().map(|&(key, value)| {
                let value_empty = self.nodes.get(value).is_none_or(|n| n.span.is_empty());
                if value_empty {
                    key
                } else {
                    value
                }
            }),
            NodeKind::Scalar { .. } | NodeKind::Alias { .. } => None,
        };
        last_child
            .and_then(|child| self.nodes.get(child))
            .map_or(node.span.start, |child| child.span.end.max(node.span.start))
    }
}

/// Line and column of byte `to`, starting from the parser's marker for byte `from`
/// (`from <= to`, a few bytes apart: the tag and anchor before a scalar).
fn advance(text: &str, marker: Marker, from: usize, to: usize) -> (usize, usize) {
    let mut line = marker.line();
    let mut column = marker.col() + 1;
    for c in text.get(from..to).unwrap_or("").chars() {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

/// The exact bytes of a scalar as written, from the parser's span, which starts at the node's
/// tag or anchor and, for quoted scalars, may run past the closing quote (over trailing
/// spaces and comments).
fn scalar_range(text: &str, raw: Range<usize>, style: YamlStyle) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    let start = skip_properties(bytes, raw.clone());
    match style {
        YamlStyle::DoubleQuoted => {
            if bytes.get(start) != Some(&b'"') {
                return None;
            }
            let mut i = start + 1;
            while let Some(&b) = bytes.get(i) {
                match b {
                    b'\\' => i += 2,
                    b'"' => return Some(start..i + 1),
                    _ => i += 1,
                }
            }
            None
        }
        YamlStyle::SingleQuoted => {
            if bytes.get(start) != Some(&b'\'') {
                return None;
            }
            let mut i = start + 1;
            while let Some(&b) = bytes.get(i) {
                if b == b'\'' {
                    if bytes.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    return Some(start..i + 1);
                }
                i += 1;
            }
            None
        }
        YamlStyle::Plain | YamlStyle::Literal | YamlStyle::Folded => {
            let mut end = raw.end.max(start);
            while end > start && matches!(bytes.get(end - 1), Some(b' ' | b'\t' | b'\r' | b'\n')) {
                end -= 1;
            }
            Some(start..end)
        }
    }
}

/// Skips a node's properties (`&anchor`, `!tag`, in any order) and the separation after them.
fn skip_properties(bytes: &[u8], raw: Range<usize>) -> usize {
    let mut i = raw.start;
    while i < raw.end && matches!(bytes.get(i), Some(b'&' | b'!')) {
        while i < raw.end
            && !matches!(
                bytes.get(i),
                Some(b' ' | b'\t' | b'\r' | b'\n' | b',' | b'[' | b']' | b'{' | b'}')
            )
        {
            i += 1;
        }
        while i < raw.end {
            match bytes.get(i) {
                Some(b' ' | b'\t' | b'\r' | b'\n') => i += 1,
                Some(b'#') => {
                    while i < raw.end && bytes.get(i) != Some(&b'\n') {
                        i += 1;
                    }
                }
                _ => break,
            }
        }
    }
    i
}

/// Results across the documents of a file, deduplicated by target.
#[derive(Default)]
struct Collector {
    fields: Vec<ImageField>,
    skipped: Vec<SkippedField>,
    targets: HashSet<(usize, usize, bool)>,
}

impl Collector {
    fn field(&mut self, field: ImageField) {
        let span = field.target.span();
        let insert = matches!(field.target, Target::InsertKustomizeDigest { .. });
        if self.targets.insert((span.start, span.end, insert)) {
            self.fields.push(field);
        }
    }

    fn skip(&mut self, node: &Node, reason: SkipReason, origin: Origin) {
        self.skipped.push(SkippedField {
            line: node.line,
            column: node.column,
            reason,
            origin,
        });
    }
}

/// Kustomize's own `kind`s (and the files it reads without one) carry an `images:` list.
fn is_kustomization(kind: Option<&str>, api_version: Option<&str>, file_named: bool) -> bool {
    let kustomize_api = api_version.is_none_or(|api| api.starts_with("kustomize.config.k8s.io/"));
    match kind {
        Some("Kustomization" | "Component") => kustomize_api,
        Some(_) => false,
        None => file_named && kustomize_api,
    }
}

/// Walks one document's tree along the paths that hold images.
struct DocumentWalker<'a> {
    path: &'a Path,
    text: &'a str,
    nodes: &'a [Node],
    document: usize,
}

impl DocumentWalker<'_> {
    /// Collects the document's fields; returns whether it is a Kubernetes document.
    fn scan(
        &self,
        root: Option<usize>,
        kustomization_file: bool,
        out: &mut Collector,
    ) -> Result<bool, ManifestError> {
        let Some(root) = root.map(|root| self.resolve(root)) else {
            return Ok(false);
        };
        if !self.is_mapping(root) {
            return Ok(false);
        }
        let kind = self.get_str(root, "kind")?;
        let api_version = self.get_str(root, "apiVersion")?;
        if is_kustomization(kind, api_version, kustomization_file) {
            self.scan_kustomization(root, out)?;
            return Ok(true);
        }
        if kind.is_none() || api_version.is_none() {
            return Ok(false);
        }
        self.scan_objects(root, out)?;
        Ok(true)
    }

    fn node(&self, id: usize) -> Option<&Node> {
        self.nodes.get(id)
    }

    /// Follows an alias to its anchored node (one step: anchors are never on aliases).
    fn resolve(&self, id: usize) -> usize {
        match self.node(id).map(|node| &node.kind) {
            Some(NodeKind::Alias { target }) => *target,
            _ => id,
        }
    }

    fn is_mapping(&self, id: usize) -> bool {
        matches!(
            self.node(self.resolve(id)).map(|node| &node.kind),
            Some(NodeKind::Mapping { .. })
        )
    }

    fn entries(&self, id: usize) -> &[(usize, usize)] {
        match self.node(self.resolve(id)).map(|node| &node.kind) {
            Some(NodeKind::Mapping { entries, .. }) => entries,
            _ => &[],
        }
    }

    fn items(&self, id: usize) -> &[usize] {
        match self.node(self.resolve(id)).map(|node| &node.kind) {
            Some(NodeKind::Sequence { items }) => items,
            _ => &[],
        }
    }

    /// The scalar's decoded value, if the (resolved) node is a scalar.
    fn scalar(&self, id: usize) -> Option<(&str, YamlStyle)> {
        match self.node(self.resolve(id)).map(|node| &node.kind) {
            Some(NodeKind::Scalar { value, style }) => Some((value.as_str(), *style)),
            _ => None,
        }
    }

    fn key_is(&self, key: usize, name: &str, style: Option<YamlStyle>) -> bool {
        self.scalar(key)
            .is_some_and(|(value, s)| value == name && style.is_none_or(|want| want == s))
    }

    /// Looks `key` up in a mapping, then in what it merges (`<<: *base`, YAML 1.1 merge keys,
    /// which Kubernetes' YAML reader honours): explicit keys win over merged ones, earlier
    /// merge sources over later ones. Each mapping is visited once, so a crafted chain of
    /// merges costs at most one pass over the document.
    fn get(&self, mapping: usize, key: &str) -> Result<Option<usize>, ManifestError> {
        let mut pending = vec![self.resolve(mapping)];
        let mut visited = HashSet::new();
        while let Some(current) = pending.pop() {
            if !visited.insert(current) {
                continue;
            }
            let entries = self.entries(current);
            let mut found: Option<usize> = None;
            for &(k, v) in entries {
                if self.key_is(k, key, None) {
                    if found.is_some() {
                        return Err(self.invalid_at(k, &format!("duplicate key `{key}`")));
                    }
                    found = Some(v);
                }
            }
            if found.is_some() {
                return Ok(found);
            }
            let mut sources = Vec::new();
            for &(k, v) in entries {
                if self.key_is(k, "<<", Some(YamlStyle::Plain)) {
                    let v = self.resolve(v);
                    if self.is_mapping(v) {
                        sources.push(v);
                    } else {
                        sources.extend(self.items(v).iter().map(|&item| self.resolve(item)));
                    }
                }
            }
            pending.extend(sources.into_iter().rev());
        }
        Ok(None)
    }

    /// A string-valued key (`kind`, `name`, ...); non-scalars and empty values count as absent.
    fn get_str(&self, mapping: usize, key: &str) -> Result<Option<&str>, ManifestError> {
        Ok(self
            .get(mapping, key)?
            .and_then(|value| self.scalar(value))
            .filter(|(value, style)| !value.is_empty() && !is_block(*style))
            .map(|(value, _)| value))
    }

    fn get_path(&self, mapping: usize, path: &[&str]) -> Result<Option<usize>, ManifestError> {
        let mut current = mapping;
        for key in path {
            match self.get(current, key)? {
                Some(next) => current = next,
                None => return Ok(None),
            }
        }
        Ok(Some(current))
    }

    fn invalid_at(&self, id: usize, message: &str) -> ManifestError {
        let (line, column) = self.node(id).map_or((0, 0), |n| (n.line, n.column));
        ManifestError::InvalidYaml {
            path: self.path.to_path_buf(),
            line,
            column,
            message: message.to_string(),
        }
    }

    /// Scans an object and, for `kind: List` and `*List` kinds, its items, with an explicit
    /// work list and a visited set (aliases may repeat items, or even make a list contain
    /// itself).
    fn scan_objects(&self, root: usize, out: &mut Collector) -> Result<(), ManifestError> {
        let mut pending = vec![root];
        let mut visited_objects = HashSet::new();
        let mut visited_lists = HashSet::new();
        while let Some(object) = pending.pop() {
            let object = self.resolve(object);
            if !visited_objects.insert(object) || !self.is_mapping(object) {
                continue;
            }
            let Some(kind) = self.get_str(object, "kind")? else {
                continue;
            };
            if self.get_str(object, "apiVersion")?.is_none() {
                continue;
            }
            if kind.ends_with("List") {
                if let Some(items) = self.get(object, "items")? {
                    pending.extend(self.items(items).iter().rev());
                }
                continue;
            }
            let Some(kind) = WorkloadKind::from_kind(kind) else {
                continue;
            };
            let Some(pod_spec) = self.get_path(object, kind.pod_spec_path())? else {
                continue;
            };
            let metadata = self.get(object, "metadata")?;
            let (name, namespace) = match metadata {
                Some(metadata) => (
                    self.get_str(metadata, "name")?.unwrap_or(""),
                    self.get_str(metadata, "namespace")?,
                ),
                None => ("", None),
            };
            for list in ContainerList::ALL {
                let Some(containers) = self.get(pod_spec, list.key())? else {
                    continue;
                };
                if !visited_lists.insert(self.resolve(containers)) {
                    continue;
                }
                for &container in self.items(containers) {
                    let container_name = self.get_str(container, "name")?.unwrap_or("");
                    let origin = Origin::Container {
                        workload: WorkloadId {
                            namespace: namespace.map(str::to_string),
                            kind,
                            name: name.to_string(),
                        },
                        container: container_name.to_string(),
                        list,
                        document: self.document,
                    };
                    if let Some(image) = self.get(container, "image")? {
                        self.image_field(image, origin, out);
                    }
                }
            }
        }
        Ok(())
    }

    /// Records a container image, or the reason it cannot be pinned.
    fn image_field(&self, image: usize, origin: Origin, out: &mut Collector) {
        let Some(node) = self.node(self.resolve(image)) else {
            return;
        };
        match self.string_target(node) {
            Ok((value, target)) => out.field(ImageField {
                line: node.line,
                column: node.column,
                value: value.to_string(),
                target,
                origin,
            }),
            Err(reason) => out.skip(node, reason, origin),
        }
    }

    /// A scalar that can be replaced in place: its value and target, or why not.
    fn string_target<'n>(&self, node: &'n Node) -> Result<(&'n str, Target), SkipReason> {
        let NodeKind::Scalar { value, style } = &node.kind else {
            return Err(SkipReason::NotAString);
        };
        let style = match style {
            YamlStyle::Plain => ScalarStyle::Plain,
            YamlStyle::SingleQuoted => ScalarStyle::SingleQuoted,
            YamlStyle::DoubleQuoted => ScalarStyle::DoubleQuoted,
            YamlStyle::Literal | YamlStyle::Folded => return Err(SkipReason::BlockScalar),
        };
        if value.is_empty()
            || (style == ScalarStyle::Plain
                && matches!(value.as_str(), "~" | "null" | "Null" | "NULL"))
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

    fn scan_kustomization(&self, root: usize, out: &mut Collector) -> Result<(), ManifestError> {
        let Some(images) = self.get(root, "images")? else {
            return Ok(());
        };
        for &item in self.items(images) {
            let entry = self.resolve(item);
            let Some(entry_node) = self.node(entry) else {
                continue;
            };
            let mut origin = Origin::KustomizeImage {
                name: String::new(),
                document: self.document,
                current_digest: None,
            };
            if !self.is_mapping(entry) {
                out.skip(entry_node, SkipReason::KustomizeEntryNotAMapping, origin);
                continue;
            }
            let Some(name) = self.get_str(entry, "name")? else {
                out.skip(entry_node, SkipReason::KustomizeWithoutName, origin);
                continue;
            };
            origin = Origin::KustomizeImage {
                name: name.to_string(),
                document: self.document,
                current_digest: None,
            };
            let new_tag = self.get(entry, "newTag")?;
            let Some((tag_node, tag)) = new_tag
                .and_then(|id| self.node(self.resolve(id)))
                .and_then(|node| self.string_target(node).ok().map(|(tag, _)| (node, tag)))
            else {
                out.skip(entry_node, SkipReason::KustomizeWithoutNewTag, origin);
                continue;
            };
            let image = self.get_str(entry, "newName")?.unwrap_or(name);
            let value = format!("{image}:{tag}");
            let (line, column) = (tag_node.line, tag_node.column);
            match self.get(entry, "digest")? {
                Some(digest) => {
                    let Some(digest_node) = self.node(self.resolve(digest)) else {
                        continue;
                    };
                    match self.string_target(digest_node) {
                        Ok((current, target)) => {
                            origin = Origin::KustomizeImage {
                                name: name.to_string(),
                                document: self.document,
                                current_digest: Some(current.to_string()),
                            };
                            out.field(ImageField {
                                line,
                                column,
                                value,
                                target,
                                origin,
                            });
                        }
                        Err(reason) => out.skip(digest_node, reason, origin),
                    }
                }
                None => match self.digest_insertion(entry) {
                    Some(target) => out.field(ImageField {
                        line,
                        column,
                        value,
                        target,
                        origin,
                    }),
                    None => out.skip(entry_node, SkipReason::KustomizeNoPlaceForDigest, origin),
                },
            }
        }
        Ok(())
    }

    /// Where a `digest:` key can go in a kustomize entry that has none: after its last value.
    fn digest_insertion(&self, entry: usize) -> Option<Target> {
        let node = self.node(entry)?;
        let NodeKind::Mapping { entries, flow } = &node.kind else {
            return None;
        };
        let &(last_key, last_value) = entries.last()?;
        let key = self.node(last_key)?;
        let value = self.node(last_value)?;
        if value.span.is_empty() {
            return None;
        }
        if let NodeKind::Scalar {
            style: YamlStyle::Literal | YamlStyle::Folded,
            ..
        } = value.kind
        {
            return None;
        }
        if *flow {
            return Some(Target::InsertKustomizeDigest {
                at: value.span.end,
                indent: String::new(),
                flow: true,
            });
        }
        Some(Target::InsertKustomizeDigest {
            at: line_end(self.text, value.span.end),
            indent: " ".repeat(key.column.saturating_sub(1)),
            flow: false,
        })
    }
}

fn is_block(style: YamlStyle) -> bool {
    matches!(style, YamlStyle::Literal | YamlStyle::Folded)
}

/// The offset of the line break (`\n`, or the `\r` of `\r\n`) ending the line that contains
/// byte `from`, or the end of the text when that line is the last and has none.
fn line_end(text: &str, from: usize) -> usize {
    let bytes = text.as_bytes();
    let Some(newline) = bytes
        .get(from..)
        .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
    else {
        return text.len();
    };
    let at = from + newline;
    if at > from && bytes.get(at - 1) == Some(&b'\r') {
        at - 1
    } else {
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    fn scan_str(path: &str, text: &str) -> ScanOutcome {
        scan(Path::new(path), text.as_bytes()).unwrap_or_else(|error| panic!("{error}"))
    }

    fn written<'t>(text: &'t str, field: &ImageField) -> &'t str {
        match &field.target {
            Target::Scalar { span, .. } => &text[span.clone()],
            Target::InsertKustomizeDigest { .. } => panic!("not a scalar target: {field:?}"),
        }
    }

    fn style(field: &ImageField) -> ScalarStyle {
        match &field.target {
            Target::Scalar { style, .. } => *style,
            Target::InsertKustomizeDigest { .. } => panic!("not a scalar target: {field:?}"),
        }
    }

    fn deployment(containers: &str) -> String {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n{containers}"
        )
    }

    const ONE_CONTAINER: &str = "      containers:\n      - name: app\n        image: nginx:1.27\n";

    #[test]
    fn finds_the_image_of_a_block_style_deployment() {
        let text = deployment(ONE_CONTAINER);
        let outcome = scan_str("web.yaml", &text);
        assert_eq!(outcome.fields.len(), 1);
        let field = &outcome.fields[0];
        assert_eq!(field.value, "nginx:1.27");
        assert_eq!(written(&text, field), "nginx:1.27");
        assert_eq!(style(field), ScalarStyle::Plain);
        assert_eq!((field.line, field.column), (10, 16));
        assert_eq!(
            field.origin,
            Origin::Container {
                workload: "Deployment/web".parse().unwrap(),
                container: "app".into(),
                list: ContainerList::Containers,
                document: 0,
            }
        );
        assert_eq!((outcome.documents, outcome.kubernetes_documents), (1, 1));
    }

    #[test]
    fn spans_include_quotes_and_decode_escapes() {
        let text = deployment(concat!(
            "      containers:\n",
            "      - name: a\n        image: 'nginx:1.27'\n",
            "      - name: b\n        image: \"redis:\\x37\"\n",
            "      - name: c\n        image: 'it''s:1'\n",
        ));
        let outcome = scan_str("web.yaml", &text);
        let seen: Vec<(&str, &str, ScalarStyle)> = outcome
            .fields
            .iter()
            .map(|f| (f.value.as_str(), written(&text, f), style(f)))
            .collect();
        assert_eq!(
            seen,
            [
                ("nginx:1.27", "'nginx:1.27'", ScalarStyle::SingleQuoted),
                ("redis:7", "\"redis:\\x37\"", ScalarStyle::DoubleQuoted),
                ("it's:1", "'it''s:1'", ScalarStyle::SingleQuoted),
            ]
        );
    }

    #[test]
    fn quoted_span_stops_at_the_closing_quote_before_spaces_and_comment() {
        let text = deployment(
            "      containers:\n      - name: a\n        image: \"nginx:1.27\"   # pinned? \"no\"\n",
        );
        let outcome = scan_str("web.yaml", &text);
        assert_eq!(written(&text, &outcome.fields[0]), "\"nginx:1.27\"");
    }

    #[test]
    fn plain_span_stops_before_a_trailing_comment() {
        let text = deployment(
            "      containers:\n      - name: a\n        image: nginx:1.27   # keep in sync\n",
        );
        let outcome = scan_str("web.yaml", &text);
        assert_eq!(written(&text, &outcome.fields[0]), "nginx:1.27");
    }

    #[test]
    fn span_excludes_tag_and_anchor() {
        let text = deployment(
            "      containers:\n      - name: a\n        image: !!str &img 'nginx:1.27'\n",
        );
        let outcome = scan_str("web.yaml", &text);
        let field = &outcome.fields[0];
        assert_eq!(written(&text, field), "'nginx:1.27'");
        assert_eq!((field.line, field.column), (10, 27));
    }

    #[test]
    fn byte_order_mark_shifts_spans_by_three_bytes_but_not_columns() {
        let text = format!("\u{feff}{}", deployment(ONE_CONTAINER));
        let outcome = scan_str("web.yaml", &text);
        let field = &outcome.fields[0];
        assert_eq!(written(&text, field), "nginx:1.27");
        assert_eq!((field.line, field.column), (10, 16));
    }

    #[test]
    fn multibyte_characters_before_the_image_do_not_shift_spans() {
        let text = deployment(
            "      # ünïcødé 😀 commentary €€€\n      containers:\n      - name: 名前\n        image: \"nginx:1.27\" # ☃\n",
        );
        let outcome = scan_str("web.yaml", &text);
        let field = &outcome.fields[0];
        assert_eq!(written(&text, field), "\"nginx:1.27\"");
        assert_eq!((field.line, field.column), (11, 16));
        assert!(
            matches!(&field.origin, Origin::Container { container, .. } if container == "名前")
        );
    }

    #[test]
    fn long_non_ascii_files_convert_offsets_past_many_checkpoints() {
        let filler = "# ☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃\n".repeat(500);
        let text = format!("{filler}{}{filler}", deployment(ONE_CONTAINER));
        let outcome = scan_str("web.yaml", &text);
        assert_eq!(written(&text, &outcome.fields[0]), "nginx:1.27");
    }

    #[test]
    fn crlf_line_endings_keep_spans_exact() {
        let text = deployment(ONE_CONTAINER).replace('\n', "\r\n");
        let outcome = scan_str("web.yaml", &text);
        let field = &outcome.fields[0];
        assert_eq!(written(&text, field), "nginx:1.27");
        assert_eq!(field.line, 10);
    }

    #[test]
    fn flow_style_containers_are_found() {
        let text = deployment(
            "      containers: [{name: a, image: nginx:1.27}, {name: b, image: \"redis:7\"}]\n",
        );
        let outcome = scan_str("web.yaml", &text);
        let written: Vec<&str> = outcome.fields.iter().map(|f| written(&text, f)).collect();
        assert_eq!(written, ["nginx:1.27", "\"redis:7\""]);
    }

    #[test]
    fn init_and_ephemeral_containers_are_found_with_their_list() {
        let text = concat!(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec:\n",
            "  ephemeralContainers: [{name: debug, image: busybox}]\n",
            "  initContainers: [{name: init, image: alpine:3}]\n",
            "  containers: [{name: app, image: nginx}]\n",
        );
        let outcome = scan_str("pod.yaml", text);
        let lists: Vec<(ContainerList, &str)> = outcome
            .fields
            .iter()
            .map(|f| match &f.origin {
                Origin::Container { list, workload, .. } => {
                    assert_eq!(workload.namespace.as_deref(), Some("ns"));
                    (*list, f.value.as_str())
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            lists,
            [
                (ContainerList::Containers, "nginx"),
                (ContainerList::InitContainers, "alpine:3"),
                (ContainerList::EphemeralContainers, "busybox"),
            ]
        );
    }

    #[test]
    fn every_workload_kind_is_read_at_its_pod_spec_path() {
        let pod_spec = "{containers: [{name: c, image: img}]}";
        let cases = [
            ("Pod", format!("spec: {pod_spec}")),
            ("PodTemplate", format!("template: {{spec: {pod_spec}}}")),
            (
                "CronJob",
                format!("spec: {{jobTemplate: {{spec: {{template: {{spec: {pod_spec}}}}}}}}}"),
            ),
            (
                "Deployment",
                format!("spec: {{template: {{spec: {pod_spec}}}}}"),
            ),
            (
                "StatefulSet",
                format!("spec: {{template: {{spec: {pod_spec}}}}}"),
            ),
            (
                "DaemonSet",
                format!("spec: {{template: {{spec: {pod_spec}}}}}"),
            ),
            (
                "ReplicaSet",
                format!("spec: {{template: {{spec: {pod_spec}}}}}"),
            ),
            (
                "ReplicationController",
                format!("spec: {{template: {{spec: {pod_spec}}}}}"),
            ),
            ("Job", format!("spec: {{template: {{spec: {pod_spec}}}}}")),
            (
                "DeploymentConfig",
                format!("spec: {{template: {{spec: {pod_spec}}}}}"),
            ),
        ];
        for (kind, body) in cases {
            let text = format!("apiVersion: x/v1\nkind: {kind}\n{body}\n");
            let outcome = scan_str("w.yaml", &text);
            assert_eq!(outcome.fields.len(), 1, "{kind}");
            // The same body under another kind is not a workload.
            let text = format!("apiVersion: x/v1\nkind: Service\n{body}\n");
            assert!(scan_str("w.yaml", &text).fields.is_empty(), "{kind}");
        }
    }

    #[test]
    fn list_kinds_are_scanned_item_by_item() {
        let text = concat!(
            "apiVersion: v1\nkind: List\nitems:\n",
            "- apiVersion: v1\n  kind: Pod\n  metadata: {name: one}\n  spec: {containers: [{name: a, image: a:1}]}\n",
            "- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cm}\n",
            "- apiVersion: apps/v1\n  kind: DeploymentList\n  items:\n",
            "  - apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: two}\n",
            "    spec: {template: {spec: {containers: [{name: b, image: b:2}]}}}\n",
        );
        let outcome = scan_str("list.yaml", text);
        let found: Vec<(&str, &str)> = outcome
            .fields
            .iter()
            .map(|f| match &f.origin {
                Origin::Container { workload, .. } => (workload.name.as_str(), f.value.as_str()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(found, [("one", "a:1"), ("two", "b:2")]);
    }

    #[test]
    fn list_items_without_api_version_are_ignored() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n  spec: {containers: [{name: a, image: a:1}]}\n";
        assert!(scan_str("list.yaml", text).fields.is_empty());
    }

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
    fn alias_before_anchor_order_reports_the_anchor_position() {
        let text = concat!(
            "base: &img 'nginx:1.27'\n",
            "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: *img\n",
        );
        let outcome = scan_str("pod.yaml", text);
        let field = &outcome.fields[0];
        assert_eq!(written(text, field), "'nginx:1.27'");
        assert_eq!((field.line, field.column), (1, 12));
    }

    #[test]
    fn merge_key_images_are_found_in_the_merged_mapping() {
        let text = concat!(
            "apiVersion: v1\nkind: Pod\n",
            "defaults: &defaults {image: 'nginx:1.27', imagePullPolicy: Always}\n",
            "spec:\n  containers:\n  - <<: *defaults\n    name: a\n  - <<: [*defaults]\n    name: b\n    image: redis:7\n",
        );
        let outcome = scan_str("pod.yaml", text);
        let written: Vec<&str> = outcome.fields.iter().map(|f| written(text, f)).collect();
        assert_eq!(written, ["'nginx:1.27'", "redis:7"]);
    }

    #[test]
    fn shared_container_list_is_reported_once() {
        let text = concat!(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: &c [{name: x, image: x:1}]\n",
            "---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec:\n  containers: [{name: y, image: y:1}]\n",
        );
        let outcome = scan_str("pods.yaml", text);
        assert_eq!(outcome.fields.len(), 2);
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
        let outcome = scan_str("pod.yaml", text);
        assert_eq!((outcome.fields.len(), outcome.kubernetes_documents), (0, 0));
    }

    #[test]
    fn empty_file_has_no_documents() {
        let outcome = scan_str("empty.yaml", "");
        assert_eq!((outcome.documents, outcome.kubernetes_documents), (0, 0));
    }

    #[test]
    fn json_manifests_are_scanned_with_spans_on_the_json_strings() {
        let text = "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Pod\",\n  \"spec\": {\n    \"containers\": [\n      {\"name\": \"a\", \"image\": \"nginx:1.27\"}\n    ]\n  }\n}\n";
        let outcome = scan_str("pod.json", text);
        let field = &outcome.fields[0];
        assert_eq!(written(text, field), "\"nginx:1.27\"");
        assert_eq!((field.line, field.column), (6, 30));
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
        let reasons: Vec<SkipReason> = scan_str("pod.yaml", text)
            .skipped
            .iter()
            .map(|s| s.reason)
            .collect();
        assert_eq!(
            reasons,
            [
                SkipReason::Empty,
                SkipReason::Empty,
                SkipReason::NotAString,
                SkipReason::Empty
            ]
        );
    }

    #[test]
    fn digest_references_are_reported_as_written() {
        let digest = "sha256:".to_string() + &"a".repeat(64);
        let text = format!("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: repo@{digest}\n");
        let outcome = scan_str("pod.yaml", &text);
        assert_eq!(outcome.fields[0].value, format!("repo@{digest}"));
    }

    #[test]
    fn duplicate_image_key_is_an_error_naming_the_line() {
        let text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: a:1\n    image: a:2\n";
        let error = scan(Path::new("pod.yaml"), text.as_bytes()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pod.yaml:7:5: invalid YAML: duplicate key `image`"
        );
    }

    #[test]
    fn kustomization_digest_key_is_the_target_and_its_value_is_exposed() {
        let text = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nimages:\n- name: nginx\n  newTag: \"1.27\"\n  digest: sha256:old\n";
        let outcome = scan_str("any-name.yaml", text);
        let field = &outcome.fields[0];
        assert_eq!(field.value, "nginx:1.27");
        assert_eq!(written(text, field), "sha256:old");
        assert_eq!((field.line, field.column), (5, 11));
        assert_eq!(
            field.origin,
            Origin::KustomizeImage {
                name: "nginx".into(),
                document: 0,
                current_digest: Some("sha256:old".into()),
            }
        );
        assert_eq!(outcome.kubernetes_documents, 1);
    }

    #[test]
    fn kustomization_new_name_replaces_the_name_in_the_value() {
        let text =
            "images:\n- name: nginx\n  newName: registry.example.com/nginx\n  newTag: '1.27'\n";
        let outcome = scan_str("base/kustomization.yaml", text);
        assert_eq!(outcome.fields[0].value, "registry.example.com/nginx:1.27");
    }

    #[test]
    fn kustomization_file_is_recognized_by_name_without_kind() {
        for name in ["kustomization.yaml", "kustomization.yml", "Kustomization"] {
            let outcome = scan_str(name, "images:\n- name: a\n  newTag: b\n");
            assert_eq!(outcome.fields.len(), 1, "{name}");
        }
        let outcome = scan_str("other.yaml", "images:\n- name: a\n  newTag: b\n");
        assert_eq!((outcome.fields.len(), outcome.kubernetes_documents), (0, 0));
    }

    #[test]
    fn flux_kustomization_is_kubernetes_but_not_a_kustomize_file() {
        let text = "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nimages:\n- name: a\n  newTag: b\n";
        let outcome = scan_str("kustomization.yaml", text);
        assert_eq!((outcome.fields.len(), outcome.kubernetes_documents), (0, 1));
    }

    #[test]
    fn kustomization_block_entry_without_digest_gets_an_insertion_at_its_last_line_end() {
        let text = "images:\n  - name: nginx\n    newTag: \"1.27\"   # pinned by tagpin\n  - name: redis\n    newTag: '7'";
        let outcome = scan_str("kustomization.yaml", text);
        let targets: Vec<&Target> = outcome.fields.iter().map(|f| &f.target).collect();
        let first_line_end = text
            .find("   # pinned")
            .map(|i| i + "   # pinned by tagpin".len());
        assert_eq!(
            targets,
            [
                &Target::InsertKustomizeDigest {
                    at: first_line_end.unwrap_or(0),
                    indent: "    ".into(),
                    flow: false
                },
                &Target::InsertKustomizeDigest {
                    at: text.len(),
                    indent: "    ".into(),
                    flow: false
                },
            ]
        );
    }

    #[test]
    fn kustomization_insertion_point_is_before_a_crlf() {
        let text = "images:\r\n- name: nginx\r\n  newTag: \"1.27\"\r\n";
        let outcome = scan_str("kustomization.yaml", text);
        let at = text.len() - 2;
        assert_eq!(
            outcome.fields[0].target,
            Target::InsertKustomizeDigest {
                at,
                indent: "  ".into(),
                flow: false
            }
        );
    }

    #[test]
    fn kustomization_flow_entry_without_digest_gets_an_insertion_after_its_last_value() {
        let text = "images: [{name: nginx, newTag: \"1.27\" }]\n";
        let outcome = scan_str("kustomization.yaml", text);
        let at = text.find(" }").unwrap_or(0);
        assert_eq!(
            outcome.fields[0].target,
            Target::InsertKustomizeDigest {
                at,
                indent: String::new(),
                flow: true
            }
        );
    }

    #[test]
    fn kustomization_entries_without_new_tag_or_name_are_skipped() {
        let text = "images:\n- name: nginx\n  digest: sha256:abc\n- newTag: '1'\n- just-a-string\n";
        let reasons: Vec<SkipReason> = scan_str("kustomization.yaml", text)
            .skipped
            .iter()
            .map(|s| s.reason)
            .collect();
        assert_eq!(
            reasons,
            [
                SkipReason::KustomizeWithoutNewTag,
                SkipReason::KustomizeWithoutName,
                SkipReason::KustomizeEntryNotAMapping,
            ]
        );
    }

    #[test]
    fn kustomization_entry_ending_in_an_empty_value_has_no_place_for_a_digest() {
        let text = "images:\n- name: nginx\n  newTag: '1'\n  newName:\n";
        let outcome = scan_str("kustomization.yaml", text);
        assert!(outcome.fields.is_empty());
        assert_eq!(
            outcome.skipped[0].reason,
            SkipReason::KustomizeNoPlaceForDigest
        );
    }

    #[test]
    fn openshift_capture_yields_its_one_image() {
        let text = include_str!(
            "../../tests/fixtures/golden/openshift-deployment/original/deployment.yaml"
        );
        let outcome = scan_str("deployment.yaml", text);
        assert_eq!(outcome.fields.len(), 1);
        let field = &outcome.fields[0];
        assert_eq!(
            written(text, field),
            "quay.io/k_nakajima/nginx-sample:latest"
        );
        assert_eq!((field.line, field.column), (28, 18));
    }

    #[test]
    fn openshift_pod_list_capture_yields_the_pod_image() {
        let text =
            include_str!("../../tests/fixtures/golden/openshift-pod-list/original/pods.yaml");
        let outcome = scan_str("pods.yaml", text);
        let values: Vec<&str> = outcome.fields.iter().map(|f| f.value.as_str()).collect();
        assert_eq!(values, ["quay.io/k_nakajima/nginx-sample:latest"]);
        assert!(
            matches!(&outcome.fields[0].origin, Origin::Container { workload, .. }
            if workload.kind == crate::workload::WorkloadKind::Pod && workload.name == "nginx-54589dd565-v9xm9")
        );
    }

    #[test]
    fn invalid_yaml_error_names_file_line_and_column() {
        let text = "apiVersion: v1\nkind: Pod\nspec:\n  containers: [\n    a: b: c\n";
        let error = scan(Path::new("deploy/web.yaml"), text.as_bytes()).unwrap_err();
        let message = error.to_string();
        assert!(message.starts_with("deploy/web.yaml:5:"), "{message}");
        assert!(message.contains(": invalid YAML: "), "{message}");
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

    #[test]
    fn alias_to_an_anchor_of_an_earlier_document_is_an_error() {
        let text = "a: &x 1\n---\nb: *x\n";
        let error = scan(Path::new("x.yaml"), text.as_bytes()).unwrap_err();
        assert!(
            error.to_string().starts_with("x.yaml:3:4: invalid YAML"),
            "{error}"
        );
    }

    #[test]
    fn hundred_thousand_nested_flow_sequences_are_an_error_not_a_stack_overflow() {
        let text = "[".repeat(100_000);
        let error = scan(Path::new("deep.yaml"), text.as_bytes()).unwrap_err();
        // The parser's own flow limit (255) may fire first, while it looks ahead.
        assert!(
            matches!(error, ManifestError::TooDeep { line: 1, .. }),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .ends_with(": nesting deeper than 100 levels"),
            "{error}"
        );
    }

    #[test]
    fn deep_block_nesting_is_an_error() {
        let mut text = String::new();
        for depth in 0..150 {
            text.push_str(&" ".repeat(depth));
            text.push_str("k:\n");
        }
        let error = scan(Path::new("x.yaml"), text.as_bytes()).unwrap_err();
        assert!(
            matches!(error, ManifestError::TooDeep { limit: 100, .. }),
            "{error}"
        );
    }

    #[test]
    fn nesting_at_the_limit_is_accepted() {
        let text = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(scan(Path::new("x.yaml"), text.as_bytes()).is_ok());
    }

    /// Ten levels of ten-fold alias fan-out: 10^10 paths if aliases were expanded.
    #[test]
    fn billion_laughs_through_lists_completes_quickly() {
        let mut text = String::from(
            "l0: &l0 {apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: Pod, spec: {containers: [{name: c, image: 'x:1'}]}}]}\n",
        );
        for level in 1..10 {
            let items = vec![format!("*l{}", level - 1); 10].join(", ");
            text.push_str(&format!(
                "l{level}: &l{level} {{apiVersion: v1, kind: List, items: [{items}]}}\n"
            ));
        }
        text.push_str("apiVersion: v1\nkind: List\nitems: [");
        text.push_str(&["*l9"; 10].join(", "));
        text.push_str("]\n");
        let started = Instant::now();
        let outcome = scan_str("lol.yaml", &text);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(outcome.fields.len(), 1);
    }

    #[test]
    fn billion_laughs_through_merge_keys_completes_quickly() {
        let mut text = String::from("m0: &m0 {imagePullPolicy: Always}\n");
        for level in 1..10 {
            let sources = vec![format!("*m{}", level - 1); 10].join(", ");
            text.push_str(&format!("m{level}: &m{level} {{<<: [{sources}]}}\n"));
        }
        text.push_str("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n");
        for i in 0..50 {
            text.push_str(&format!("  - {{<<: *m9, name: c{i}}}\n"));
        }
        let started = Instant::now();
        let outcome = scan_str("lol.yaml", &text);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(outcome.fields.is_empty());
    }

    #[test]
    fn self_referencing_list_terminates() {
        let text = "&a {apiVersion: v1, kind: List, items: [*a, {apiVersion: v1, kind: Pod, spec: {containers: [{name: c, image: x}]}}]}\n";
        let outcome = scan_str("loop.yaml", text);
        assert_eq!(outcome.fields.len(), 1);
    }

    #[test]
    fn self_referencing_merge_terminates() {
        let text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - &c {<<: *c, name: a}\n";
        // Whether the parser accepts this or not, it must return.
        let _ = scan(Path::new("loop.yaml"), text.as_bytes());
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

        #[test]
        fn every_field_span_slices_to_the_scalar_as_written(
            text in "(apiVersion: v1\nkind: (Pod|List)\n|spec:\n  containers:\n  - name: a\n    image: |items: \\[\\{apiVersion: v1, kind: Pod, spec: \\{containers: \\[\\{image: |'[a-z:é]{1,6}'|\"[a-z:\\\\\"é]{1,6}\"|&x |\\*x|[a-z:]{1,6}|\\}\\]\\}\\}\\]\n|  # é😀\n|---\n|\r\n){0,40}"
        ) {
            if let Ok(outcome) = scan(Path::new("gen.yaml"), text.as_bytes()) {
                for field in &outcome.fields {
                    let Target::Scalar { span, style } = &field.target else { continue };
                    let slice = &text[span.clone()];
                    match style {
                        ScalarStyle::Plain => prop_assert_eq!(slice.trim(), slice),
                        ScalarStyle::SingleQuoted => prop_assert!(slice.starts_with('\'') && slice.ends_with('\'')),
                        ScalarStyle::DoubleQuoted => prop_assert!(slice.starts_with('"') && slice.ends_with('"')),
                    }
                    if *style == ScalarStyle::Plain && !slice.contains('\n') {
                        prop_assert_eq!(slice, field.value.as_str());
                    }
                }
            }
        }
    }
}
