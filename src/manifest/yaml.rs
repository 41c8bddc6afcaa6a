//! A YAML tree that remembers where every value sits in the file.
//!
//! Rewriting one value of a file byte-exactly, or pointing a person at the line of a problem,
//! needs the position of each value as written, which YAML libraries that build values drop.
//! This module turns `saphyr-parser` events (or the same events, read faster by
//! [`super::simple_yaml`] when the text is simple block YAML) into a light tree per document:
//! every node keeps its byte span (quotes included, tag and anchor excluded) and its line and
//! column. Aliases point at their anchored node and are never expanded, and nesting is bounded
//! by [`MAX_DEPTH`], so a hostile file cannot blow up memory or the stack. It knows nothing of
//! Kubernetes and does no I/O: [`documents`] takes the text, the [`Document`] accessors read it.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::Path;

pub(crate) use saphyr_parser::ScalarStyle as Style;
use saphyr_parser::{BufferedInput, Event, Marker, Parser, Span, StrInput};

use super::error::{ManifestError, MAX_DEPTH};

/// A node of one [`Document`]; only that document's accessors understand it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct NodeId(usize);

/// One YAML value of the light tree, borrowing its scalar values from the text where the
/// parser could (most of them: a copy of each was some 90,000 allocations in a 2,000-file
/// pass).
pub(crate) struct Node<'a> {
    pub(crate) kind: NodeKind<'a>,
    /// Scalars: the value as written, quotes included, tag and anchor excluded. Aliases: the
    /// `*name` token. Collections: from the opening to the end of the last byte of content.
    pub(crate) span: Range<usize>,
    /// 1-based line and column (in characters) of `span.start`.
    pub(crate) line: usize,
    pub(crate) column: usize,
}

pub(crate) enum NodeKind<'a> {
    Scalar {
        value: std::borrow::Cow<'a, str>,
        style: Style,
    },
    Sequence {
        items: Vec<NodeId>,
    },
    Mapping {
        entries: Vec<(NodeId, NodeId)>,
        flow: bool,
    },
    Alias {
        target: NodeId,
    },
}

/// Whether a scalar is a `|` or `>` block scalar.
fn is_block(style: Style) -> bool {
    matches!(style, Style::Literal | Style::Folded)
}

/// The documents of `text`, the contents of the file at `path` (which names it in errors),
/// one at a time: each is built only when the one before it has been looked at, and the first
/// error ends the sequence.
pub(crate) fn documents<'a>(path: &'a Path, text: &'a str) -> Documents<'a> {
    let parser = if let Some(events) = super::simple_yaml::events(text) {
        Events::Simple(events.into_iter())
    } else if has_tab_after_colon(text) {
        Events::TabsAfterColons(Parser::new_from_iter(TabsAfterColons::new(text)))
    } else {
        Events::Text(Parser::new_from_str(text))
    };
    Documents {
        path,
        text,
        parser,
        offsets: CharOffsets::new(text),
        builder: None,
        prologue_start: 0,
        done: false,
    }
}

/// The iterator of [`documents`].
pub(crate) struct Documents<'a> {
    path: &'a Path,
    text: &'a str,
    parser: Events<'a>,
    offsets: CharOffsets<'a>,
    builder: Option<DocumentBuilder<'a>>,
    /// Byte offset where the directives of the next document may start: after the last
    /// document's end, or the start of the stream.
    prologue_start: usize,
    done: bool,
}

/// The parser, over the text as it is or with [`TabsAfterColons`]; or the same events read
/// at once by [`super::simple_yaml`] from a text in simple block YAML.
enum Events<'a> {
    Simple(std::vec::IntoIter<(Event<'a>, Span)>),
    Text(Parser<'a, StrInput<'a>>),
    TabsAfterColons(Parser<'a, BufferedInput<TabsAfterColons<'a>>>),
}

/// The most nodes a document's tree makes room for before it grows as it goes.
const MAX_NODES_HINT: usize = 4096;

impl<'a> Events<'a> {
    /// How many events are left, when they were read at once (an upper bound on the nodes
    /// of the next document); 0 when the parser reads as it goes.
    fn known_remaining(&self) -> usize {
        match self {
            Events::Simple(events) => events.len(),
            Events::Text(_) | Events::TabsAfterColons(_) => 0,
        }
    }

    fn next(&mut self) -> Option<Result<(Event<'a>, Span), saphyr_parser::ScanError>> {
        match self {
            Events::Simple(events) => events.next().map(Ok),
            Events::Text(parser) => parser.next(),
            Events::TabsAfterColons(parser) => parser.next(),
        }
    }
}

/// Whether `text` has a `:` followed by a tab and then content on the same line, the one
/// separation YAML 1.2 allows that `saphyr-parser` 0.3 refuses (`image:\tnginx:1.0`).
fn has_tab_after_colon(text: &str) -> bool {
    text.as_bytes()
        .windows(2)
        .enumerate()
        .any(|(i, pair)| pair == b":\t" && tab_run_ends_in_content(text.as_bytes(), i + 1))
}

/// Whether the run of tabs and spaces starting at `at` is followed by content on its line
/// (not a line break, a comment or the end of the text).
fn tab_run_ends_in_content(bytes: &[u8], at: usize) -> bool {
    let after = bytes[at..]
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .map(|n| bytes[at + n]);
    !matches!(after, None | Some(b'\n' | b'\r' | b'#'))
}

/// The characters of the text with the tab right after a `:` (and before content on the same
/// line) read as a space, so the parser accepts this separation as YAML 1.2 does
/// (s-separate-in-line is spaces or tabs). A space is one byte and one character, like the
/// tab, so every position the parser reports is a position in the text as written, and edits
/// land on the original bytes: the tab stays in the file. Only files that have such a tab
/// are read this way; in them, a quoted or block scalar holding `:` and a tab before more
/// text is read with a space there, a value that is never an image, a name or a path.
struct TabsAfterColons<'a> {
    text: &'a str,
    chars: std::str::CharIndices<'a>,
    after_colon: bool,
}

impl<'a> TabsAfterColons<'a> {
    fn new(text: &'a str) -> Self {
        TabsAfterColons {
            text,
            chars: text.char_indices(),
            after_colon: false,
        }
    }
}

impl Iterator for TabsAfterColons<'_> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        let (at, c) = self.chars.next()?;
        let after_colon = std::mem::replace(&mut self.after_colon, c == ':');
        if c == '\t' && after_colon && tab_run_ends_in_content(self.text.as_bytes(), at) {
            return Some(' ');
        }
        Some(c)
    }
}

/// Refuses a `%YAML` directive in `prologue` (the text between the last document's end and
/// this document's `---`, which holds only directives, comments and blank lines) whose major
/// version is not 1: YAML 1.2 §6.8.1 says such a document must be rejected, since its meaning
/// is unknown. A higher minor version of 1 is read, as the spec allows.
fn check_directives(path: &Path, text: &str, prologue: Range<usize>) -> Result<(), ManifestError> {
    let mut line_start = prologue.start;
    for line in text[prologue.clone()].split_inclusive('\n') {
        let at = line_start;
        line_start += line.len();
        let Some(version) = line.strip_prefix("%YAML") else {
            continue;
        };
        let version = version.split('#').next().unwrap_or_default().trim();
        let major = version.split('.').next().unwrap_or_default();
        if major != "1" {
            return Err(ManifestError::InvalidYaml {
                path: path.to_path_buf(),
                line: text[..at].matches('\n').count() + 1,
                column: 1,
                message: format!(
                    "%YAML {version} is a major version this parser does not know (YAML 1.2 §6.8.1)"
                ),
            });
        }
    }
    Ok(())
}

impl<'a> Iterator for Documents<'a> {
    type Item = Result<Document<'a>, ManifestError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let Some(event) = self.parser.next() else {
                self.done = true;
                break;
            };
            let (event, span) = match event {
                Ok(event) => event,
                Err(error) => {
                    self.done = true;
                    return Some(Err(parse_error(self.path, &error)));
                }
            };
            match event {
                Event::DocumentStart(_) => {
                    let start = self
                        .offsets
                        .byte(span.start.index())
                        .max(self.prologue_start);
                    let prologue = self.prologue_start..start;
                    if let Err(error) = check_directives(self.path, self.text, prologue) {
                        self.done = true;
                        return Some(Err(error));
                    }
                    let nodes = self.parser.known_remaining().min(MAX_NODES_HINT);
                    self.builder = Some(DocumentBuilder::new(self.path, self.text, nodes));
                }
                Event::DocumentEnd => {
                    self.prologue_start = self.offsets.byte(span.end.index());
                    if let Some(builder) = self.builder.take() {
                        return Some(Ok(builder.finish()));
                    }
                }
                other => {
                    if let Some(builder) = self.builder.as_mut() {
                        if let Err(error) = builder.event(other, span, &mut self.offsets) {
                            self.done = true;
                            return Some(Err(error));
                        }
                    }
                }
            }
        }
        None
    }
}

/// One document's nodes; aliases point at nodes, so nothing is ever expanded.
pub(crate) struct Document<'a> {
    path: &'a Path,
    text: &'a str,
    nodes: Vec<Node<'a>>,
    root: Option<NodeId>,
}

impl<'a> Document<'a> {
    /// The top-level value, unless the document is empty.
    pub(crate) fn root(&self) -> Option<NodeId> {
        self.root
    }

    /// The file the document was read from, as errors name it.
    pub(crate) fn path(&self) -> &'a Path {
        self.path
    }

    /// The whole text the document was parsed from (spans are offsets into it).
    pub(crate) fn text(&self) -> &'a str {
        self.text
    }

    pub(crate) fn node(&self, id: NodeId) -> Option<&Node<'a>> {
        self.nodes.get(id.0)
    }

    /// Follows an alias to its anchored node (one step: anchors are never on aliases).
    pub(crate) fn resolve(&self, id: NodeId) -> NodeId {
        match self.node(id).map(|node| &node.kind) {
            Some(NodeKind::Alias { target }) => *target,
            _ => id,
        }
    }

    /// Every node some alias of the document points at: a value that is not written once only.
    pub(crate) fn alias_targets(&self) -> HashSet<NodeId> {
        self.nodes
            .iter()
            .filter_map(|node| match node.kind {
                NodeKind::Alias { target } => Some(target),
                _ => None,
            })
            .collect()
    }

    /// Every mapping some `<<` merge key of the document merges in: its entries are not
    /// written once only either.
    pub(crate) fn merge_sources(&self) -> HashSet<NodeId> {
        let mut sources = HashSet::new();
        for node in &self.nodes {
            let NodeKind::Mapping { entries, .. } = &node.kind else {
                continue;
            };
            for &(key, value) in entries {
                if !self.key_is(key, "<<", Some(Style::Plain)) {
                    continue;
                }
                let value = self.resolve(value);
                if self.is_mapping(value) {
                    sources.insert(value);
                } else {
                    sources.extend(self.items(value).iter().map(|&item| self.resolve(item)));
                }
            }
        }
        sources
    }

    pub(crate) fn is_mapping(&self, id: NodeId) -> bool {
        matches!(
            self.node(self.resolve(id)).map(|node| &node.kind),
            Some(NodeKind::Mapping { .. })
        )
    }

    /// A mapping's own `(key, value)` entries, in file order; none for other nodes.
    pub(crate) fn entries(&self, id: NodeId) -> &[(NodeId, NodeId)] {
        match self.node(self.resolve(id)).map(|node| &node.kind) {
            Some(NodeKind::Mapping { entries, .. }) => entries,
            _ => &[],
        }
    }

    /// A sequence's items, in file order; none for other nodes.
    pub(crate) fn items(&self, id: NodeId) -> &[NodeId] {
        match self.node(self.resolve(id)).map(|node| &node.kind) {
            Some(NodeKind::Sequence { items }) => items,
            _ => &[],
        }
    }

    /// The scalar's decoded value, if the (resolved) node is a scalar.
    pub(crate) fn scalar(&self, id: NodeId) -> Option<(&str, Style)> {
        match self.node(self.resolve(id)).map(|node| &node.kind) {
            Some(NodeKind::Scalar { value, style }) => Some((value.as_ref(), *style)),
            _ => None,
        }
    }

    fn key_is(&self, key: NodeId, name: &str, style: Option<Style>) -> bool {
        self.scalar(key)
            .is_some_and(|(value, s)| value == name && style.is_none_or(|want| want == s))
    }

    /// Looks `key` up in a mapping, then in what it merges (`<<: *base`, YAML 1.1 merge keys,
    /// which Kubernetes' YAML reader honours): explicit keys win over merged ones, earlier
    /// merge sources over later ones. Each mapping is visited once, so a crafted chain of
    /// merges costs at most one pass over the document. Returns the key node and the value.
    pub(crate) fn get_entry(
        &self,
        mapping: NodeId,
        key: &str,
    ) -> Result<Option<(NodeId, NodeId)>, ManifestError> {
        // The mapping's own entries first, without the bookkeeping of merges: most mappings
        // merge nothing, and a lookup is then one pass over their keys (the visited set and
        // the queue below were an allocation or two per lookup, some 60,000 in a 2,000-file
        // `plan`).
        let mapping = self.resolve(mapping);
        let mut found: Option<(NodeId, NodeId)> = None;
        let mut merges = false;
        for &(k, v) in self.entries(mapping) {
            if self.key_is(k, key, None) {
                if found.is_some() {
                    return Err(self.invalid_at(k, &format!("duplicate key `{key}`")));
                }
                found = Some((k, v));
            } else if self.key_is(k, "<<", Some(Style::Plain)) {
                merges = true;
            }
        }
        if found.is_some() || !merges {
            return Ok(found);
        }
        let mut pending = vec![mapping];
        let mut visited = HashSet::new();
        while let Some(current) = pending.pop() {
            if !visited.insert(current) {
                continue;
            }
            let entries = self.entries(current);
            let mut found: Option<(NodeId, NodeId)> = None;
            for &(k, v) in entries {
                if self.key_is(k, key, None) {
                    if found.is_some() {
                        return Err(self.invalid_at(k, &format!("duplicate key `{key}`")));
                    }
                    found = Some((k, v));
                }
            }
            if found.is_some() {
                return Ok(found);
            }
            let mut sources = Vec::new();
            for &(k, v) in entries {
                if self.key_is(k, "<<", Some(Style::Plain)) {
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

    /// The value of `key` in a mapping, as [`Document::get_entry`] finds it.
    pub(crate) fn get(&self, mapping: NodeId, key: &str) -> Result<Option<NodeId>, ManifestError> {
        Ok(self.get_entry(mapping, key)?.map(|(_, value)| value))
    }

    /// A string-valued key (`kind`, `name`, ...); non-scalars and empty values count as absent.
    pub(crate) fn get_str(
        &self,
        mapping: NodeId,
        key: &str,
    ) -> Result<Option<&str>, ManifestError> {
        Ok(self
            .get(mapping, key)?
            .and_then(|value| self.scalar(value))
            .filter(|(value, style)| !value.is_empty() && !is_block(*style))
            .map(|(value, _)| value))
    }

    /// The value at the end of a path of mapping keys.
    pub(crate) fn get_path(
        &self,
        mapping: NodeId,
        path: &[&str],
    ) -> Result<Option<NodeId>, ManifestError> {
        let mut current = mapping;
        for key in path {
            match self.get(current, key)? {
                Some(next) => current = next,
                None => return Ok(None),
            }
        }
        Ok(Some(current))
    }

    /// An invalid-YAML error placed at a node.
    fn invalid_at(&self, id: NodeId, message: &str) -> ManifestError {
        let (line, column) = self.node(id).map_or((0, 0), |n| (n.line, n.column));
        ManifestError::InvalidYaml {
            path: self.path.to_path_buf(),
            line,
            column,
            message: message.to_string(),
        }
    }
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

/// A collection whose end event has not arrived yet.
struct Open {
    node: NodeId,
    /// For a mapping: the key waiting for its value.
    pending_key: Option<NodeId>,
    flow_context: bool,
}

/// Builds a [`Document`] from parser events, iteratively, refusing depth beyond [`MAX_DEPTH`].
struct DocumentBuilder<'a> {
    path: &'a Path,
    text: &'a str,
    nodes: Vec<Node<'a>>,
    /// Parser anchor id to node; anchors are scoped to their document.
    anchors: HashMap<usize, NodeId>,
    open: Vec<Open>,
    root: Option<NodeId>,
}

impl<'a> DocumentBuilder<'a> {
    /// `nodes`: how many nodes to make room for at once (an estimate, or 0).
    fn new(path: &'a Path, text: &'a str, nodes: usize) -> Self {
        DocumentBuilder {
            path,
            text,
            nodes: Vec::with_capacity(nodes),
            anchors: HashMap::new(),
            open: Vec::new(),
            root: None,
        }
    }

    fn finish(self) -> Document<'a> {
        Document {
            path: self.path,
            text: self.text,
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
        event: Event<'a>,
        span: Span,
        offsets: &mut CharOffsets<'_>,
    ) -> Result<(), ManifestError> {
        let text = self.text;
        let start = offsets.byte(span.start.index());
        let end = offsets.byte(span.end.index()).max(start);
        match event {
            Event::Scalar(value, style, anchor, _tag) => {
                let Some(range) = scalar_range(text, start..end, style) else {
                    return Err(self.invalid(span.start, "cannot locate this scalar in the file"));
                };
                let (line, column) = advance(text, span.start, start, range.start);
                let node = self.push(Node {
                    kind: NodeKind::Scalar { value, style },
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
                if let Some(node) = self.nodes.get_mut(open.node.0) {
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

    fn push(&mut self, node: Node<'a>) -> NodeId {
        self.nodes.push(node);
        NodeId(self.nodes.len() - 1)
    }

    fn register(&mut self, anchor: usize, node: NodeId) {
        if anchor != 0 {
            self.anchors.insert(anchor, node);
        }
    }

    /// Hangs a finished (or just opened) node on the innermost open collection.
    fn attach(&mut self, child: NodeId) {
        let Some(open) = self.open.last_mut() else {
            self.root = Some(child);
            return;
        };
        let Some(parent) = self.nodes.get_mut(open.node.0) else {
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
    fn content_end(&self, node: NodeId) -> usize {
        let Some(node) = self.nodes.get(node.0) else {
            return 0;
        };
        let last_child = match &node.kind {
            NodeKind::Sequence { items } => items.last().copied(),
            NodeKind::Mapping { entries, .. } => entries.last().map(|&(key, value)| {
                let value_empty = self.nodes.get(value.0).is_none_or(|n| n.span.is_empty());
                if value_empty {
                    key
                } else {
                    value
                }
            }),
            NodeKind::Scalar { .. } | NodeKind::Alias { .. } => None,
        };
        last_child
            .and_then(|child| self.nodes.get(child.0))
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
fn scalar_range(text: &str, raw: Range<usize>, style: Style) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    let start = skip_properties(bytes, raw.clone());
    match style {
        Style::DoubleQuoted => {
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
        Style::SingleQuoted => {
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
        Style::Plain | Style::Literal | Style::Folded => {
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

/// Most of these drive the tree through the scanner: the image spans and positions it reports
/// are the contract this module exists for.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::scan::fixtures::*;
    use crate::manifest::{scan, Origin, ScalarStyle, Target, MAX_DEPTH};
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

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
    fn a_tab_after_the_colon_separates_and_stays_out_of_the_span() {
        // YAML 1.2 allows tabs as separation whitespace after `key:`.
        let text = deployment("      containers:\n      - name: a\n        image:\tnginx:1.27\n");
        let outcome = scan_str("web.yaml", &text);
        let field = &outcome.fields[0];
        assert_eq!(written(&text, field), "nginx:1.27");
        let start = field.target.span().start;
        assert_eq!(&text[start - 1..start], "\t");
    }

    #[test]
    fn a_yaml_directive_of_an_unknown_major_version_refuses_the_file() {
        let text = "%YAML 9.9\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: a\n    image: nginx:1.27\n";
        let error = scan_error("pod.yaml", text);
        assert_eq!(
            error.to_string(),
            "pod.yaml:1:1: invalid YAML: %YAML 9.9 is a major version this parser does not know (YAML 1.2 §6.8.1)"
        );
    }

    #[test]
    fn a_later_document_of_an_unknown_yaml_version_is_refused_at_its_directive() {
        let text = "a: 1\n...\n# next\n%YAML 2.0\n---\nb: |\n  %YAML 3.0 is text here\n";
        let error = scan_error("two.yaml", text);
        assert!(
            error
                .to_string()
                .starts_with("two.yaml:4:1: invalid YAML: %YAML 2.0"),
            "{error}"
        );
        let text = "a: 1\n---\nb: |\n  %YAML 3.0 is text here\n";
        assert!(scan(Path::new("one.yaml"), text.as_bytes()).is_ok());
    }

    #[test]
    fn yaml_directives_of_version_one_are_read() {
        for version in ["1.1", "1.2", "1.3"] {
            let text = format!(
                "%YAML {version}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: a\n    image: nginx:1.27\n"
            );
            let outcome = scan_str("pod.yaml", &text);
            assert_eq!(
                written(&text, &outcome.fields[0]),
                "nginx:1.27",
                "%YAML {version}"
            );
        }
    }

    #[test]
    fn span_excludes_tag_and_anchor() {
        let text = deployment(
            "      containers:\n      - name: a\n        image: !!str &img 'nginx:1.27'\n",
        );
        let outcome = scan_str("web.yaml", &text);
        let field = &outcome.fields[0];
        assert_written_at(&text, field, "'nginx:1.27'", (10, 27));
    }

    #[test]
    fn byte_order_mark_shifts_spans_by_three_bytes_but_not_columns() {
        let text = format!("\u{feff}{}", deployment(ONE_CONTAINER));
        let outcome = scan_str("web.yaml", &text);
        let field = &outcome.fields[0];
        assert_written_at(&text, field, "nginx:1.27", (10, 16));
    }

    #[test]
    fn multibyte_characters_before_the_image_do_not_shift_spans() {
        let text = deployment(
            "      # ünïcødé 😀 commentary €€€\n      containers:\n      - name: 名前\n        image: \"nginx:1.27\" # ☃\n",
        );
        let outcome = scan_str("web.yaml", &text);
        let field = &outcome.fields[0];
        assert_written_at(&text, field, "\"nginx:1.27\"", (11, 16));
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
    fn alias_before_anchor_order_reports_the_anchor_position() {
        let text = concat!(
            "base: &img 'nginx:1.27'\n",
            "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: *img\n",
        );
        let outcome = scan_str("pod.yaml", text);
        let field = &outcome.fields[0];
        assert_written_at(text, field, "'nginx:1.27'", (1, 12));
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
    fn json_manifests_are_scanned_with_spans_on_the_json_strings() {
        let text = "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Pod\",\n  \"spec\": {\n    \"containers\": [\n      {\"name\": \"a\", \"image\": \"nginx:1.27\"}\n    ]\n  }\n}\n";
        let outcome = scan_str("pod.json", text);
        let field = &outcome.fields[0];
        assert_written_at(text, field, "\"nginx:1.27\"", (6, 30));
    }

    #[test]
    fn duplicate_image_key_is_an_error_naming_the_line() {
        let text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: a:1\n    image: a:2\n";
        let error = scan_error("pod.yaml", text);
        assert_eq!(
            error.to_string(),
            "pod.yaml:7:5: invalid YAML: duplicate key `image`"
        );
    }

    #[test]
    fn invalid_yaml_error_names_file_line_and_column() {
        let text = "apiVersion: v1\nkind: Pod\nspec:\n  containers: [\n    a: b: c\n";
        let error = scan_error("deploy/web.yaml", text);
        let message = error.to_string();
        assert!(message.starts_with("deploy/web.yaml:5:"), "{message}");
        assert!(message.contains(": invalid YAML: "), "{message}");
    }

    #[test]
    fn alias_to_an_anchor_of_an_earlier_document_is_an_error() {
        let text = "a: &x 1\n---\nb: *x\n";
        let error = scan_error("x.yaml", text);
        assert!(
            error.to_string().starts_with("x.yaml:3:4: invalid YAML"),
            "{error}"
        );
    }

    #[test]
    fn hundred_thousand_nested_flow_sequences_are_an_error_not_a_stack_overflow() {
        let text = "[".repeat(100_000);
        let error = scan_error("deep.yaml", &text);
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
        let error = scan_error("x.yaml", &text);
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
    fn self_referencing_merge_terminates() {
        let text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - &c {<<: *c, name: a}\n";
        // Whether the parser accepts this or not, it must return.
        let _ = scan(Path::new("loop.yaml"), text.as_bytes());
    }

    proptest! {
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
