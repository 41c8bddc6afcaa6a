//! Pinning inside an Argo CD `helm.values` text, byte-exactly, or saying why not.
//!
//! `helm.values` is a YAML document written as a string, usually a literal block scalar
//! (`values: |`). Its images are found by parsing that text like any values tree; then every
//! position in the text is mapped back to the file, line by line: in a literal scalar each
//! content line is the file's line minus the block's indentation, byte for byte, so a value on
//! one line can be replaced in place (and a `digest:` line inserted, indented by the block's
//! indentation more). The map is checked against the parser's decoded text before it is used;
//! anything it cannot place exactly (a folded `>` or quoted text, a value spanning lines) is
//! skipped with its file:line, never edited.

use std::ops::Range;

use super::field::{Collector, Origin, SkipReason, SkippedField, Target};
use super::helm::{HelmImage, HelmWrite};
use super::helm_values::{scan_values, Context};
use super::yaml::{self, Document, Node, NodeId, NodeKind, Style};

/// Collects the images of the `helm.values` text at `text`.
pub(super) fn scan_values_text(
    document: &Document<'_>,
    text: NodeId,
    context: &Context,
    out: &mut Collector,
) {
    let Some(node) = document.node(document.resolve(text)) else {
        return;
    };
    let NodeKind::Scalar { value, style } = &node.kind else {
        return;
    };
    if value.trim().is_empty() {
        return;
    }
    let not_supported = |out: &mut Collector| {
        let origin = Origin::HelmImage(Box::new(HelmImage {
            source: context.source.clone(),
            part: context.part,
            key_path: String::new(),
            repository: String::new(),
            tag: None,
            digest: None,
            write: HelmWrite::TagSuffix,
            tag_target: None,
        }));
        out.skip(node, SkipReason::HelmValuesText, origin);
    };
    let map = match style {
        Style::Literal => LineMap::new(document.text(), node, value),
        _ => None,
    };
    let Some(map) = map else {
        // Only worth a word when the text holds an image at all.
        if value.contains("image") || value.contains("Image") {
            not_supported(out);
        }
        return;
    };
    let mut inner = Collector::default();
    let parsed = match yaml::documents(document.path(), value).next() {
        Some(Ok(parsed)) => parsed,
        None => return,
        Some(Err(_)) => {
            not_supported(out);
            return;
        }
    };
    let Some(root) = parsed.root().filter(|&root| parsed.is_mapping(root)) else {
        return;
    };
    if scan_values(&parsed, root, context, &mut inner).is_err() {
        not_supported(out);
        return;
    }
    for mut field in inner.fields {
        let target = map.target(&field.target);
        // `Some(None)`: no tag target to move; `None`: one that cannot be placed.
        let tag_target = match &field.origin {
            Origin::HelmImage(image) => match &image.tag_target {
                Some(at) => map.target(at).map(Some),
                None => Some(None),
            },
            _ => Some(None),
        };
        let (Some(target), Some(tag_target)) = (target, tag_target) else {
            out.skipped.push(SkippedField {
                line: map.line(field.line),
                column: field.column + map.indent,
                reason: SkipReason::HelmValuesText,
                origin: field.origin,
            });
            continue;
        };
        field.target = target;
        if let Origin::HelmImage(image) = &mut field.origin {
            image.tag_target = tag_target;
        }
        field.line = map.line(field.line);
        field.column += map.indent;
        out.field(field);
    }
    for mut skipped in inner.skipped {
        skipped.line = map.line(skipped.line);
        skipped.column += map.indent;
        out.skipped.push(skipped);
    }
}

/// Where each line of a literal block scalar's decoded text sits in the file.
struct LineMap {
    /// The block's indentation, in bytes (spaces).
    indent: usize,
    /// Per line of the decoded text: its start in the text, and the start of its content in
    /// the file (after the indentation); `None` for leading blank lines.
    lines: Vec<(usize, Option<usize>)>,
    /// The file's line of the text's first non-blank line, and that line's index in the text.
    first_line: usize,
    first_index: usize,
}

impl LineMap {
    /// Maps `value`, the decoded text of the literal scalar `node` of `file`; `None` unless every
    /// line of it is found in the file exactly as decoded.
    fn new(file: &str, node: &Node, value: &str) -> Option<LineMap> {
        let indent = node.column.checked_sub(1)?;
        let text_lines: Vec<&str> = value.split('\n').collect();
        let first_index = text_lines.iter().position(|line| !line.is_empty())?;
        // The start of the file's line holding the first non-blank line.
        let mut at = file[..node.span.start].rfind('\n').map_or(0, |n| n + 1);
        let mut lines = Vec::with_capacity(text_lines.len());
        let mut offset = 0;
        for (index, line) in text_lines.iter().enumerate() {
            let start = offset;
            offset += line.len() + 1;
            if index < first_index {
                lines.push((start, None));
                continue;
            }
            if at >= file.len() {
                // The decoded text's final line break(s) have no line of their own.
                if line.is_empty() {
                    lines.push((start, None));
                    continue;
                }
                return None;
            }
            let end = file[at..].find('\n').map_or(file.len(), |n| at + n);
            let written = file[at..end].strip_suffix('\r').unwrap_or(&file[at..end]);
            if line.is_empty() {
                if !written.trim_start_matches(' ').is_empty() {
                    // Past the block (a less indented line) while the text goes on: a final
                    // line break of the text; anything else is a mismatch.
                    if text_lines[index..].iter().all(|l| l.is_empty()) {
                        lines.push((start, None));
                        continue;
                    }
                    return None;
                }
                lines.push((start, None));
            } else {
                let (spaces, rest) = written.split_at_checked(indent)?;
                if !spaces.bytes().all(|b| b == b' ') || rest != *line {
                    return None;
                }
                lines.push((start, Some(at + indent)));
            }
            at = end + 1;
        }
        Some(LineMap {
            indent,
            lines,
            first_line: node.line,
            first_index,
        })
    }

    /// The file's line of the text's 1-based `line`.
    fn line(&self, line: usize) -> usize {
        (self.first_line + line.saturating_sub(1)).saturating_sub(self.first_index)
    }

    /// The file offset of the text's `offset`, on a line that is in the file.
    fn offset(&self, offset: usize) -> Option<(usize, usize)> {
        let index = self
            .lines
            .partition_point(|&(start, _)| start <= offset)
            .checked_sub(1)?;
        let (start, file_start) = self.lines[index];
        Some((index, file_start? + (offset - start)))
    }

    /// The file range of a text range that lies on one line.
    fn range(&self, range: &Range<usize>) -> Option<Range<usize>> {
        let (line, start) = self.offset(range.start)?;
        let (end_line, end) = self.offset(range.end)?;
        (line == end_line).then_some(start..end)
    }

    /// A target of the text, moved to the file.
    fn target(&self, target: &Target) -> Option<Target> {
        match target {
            Target::Scalar { span, style } => Some(Target::Scalar {
                span: self.range(span)?,
                style: *style,
            }),
            Target::InsertKustomizeDigest { at, indent, flow } => {
                Some(Target::InsertKustomizeDigest {
                    at: self.offset(*at)?.1,
                    indent: if *flow {
                        indent.clone()
                    } else {
                        format!("{}{indent}", " ".repeat(self.indent))
                    },
                    flow: *flow,
                })
            }
            Target::InsertHelmParameter { at, indent, name } => Some(Target::InsertHelmParameter {
                at: self.offset(*at)?.1,
                indent: format!("{}{indent}", " ".repeat(self.indent)),
                name: name.clone(),
            }),
        }
    }
}
