//! Splicing new values into a manifest without touching any other byte.
//!
//! Re-serializing YAML loses comments, quotes, indentation and line endings; a reviewer would
//! then face a diff of the whole file. Here the scanner's byte spans are replaced in place and
//! everything outside them is copied verbatim. Pure: bytes in, bytes out.

use std::ops::Range;

use super::error::ManifestError;
use super::field::{ScalarStyle, Target};

/// One change to a file: put `new_value` (decoded, unquoted) at `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub target: Target,
    pub new_value: String,
}

/// Applies `edits` to `source`, copying every byte outside the edited spans unchanged.
///
/// Edits may come in any order but must not overlap. When no edit changes anything the result
/// equals `source`, so callers can compare and skip writing (and committing).
pub fn apply(source: &[u8], edits: &[Edit]) -> Result<Vec<u8>, ManifestError> {
    let mut ordered: Vec<(Range<usize>, &Edit)> = edits
        .iter()
        .map(|edit| (edit.target.span(), edit))
        .collect();
    ordered.sort_by_key(|(span, _)| (span.start, span.end));
    for pair in ordered.windows(2) {
        if let [(first, _), (second, _)] = pair {
            let same_insertion_point =
                first.is_empty() && second.is_empty() && first.start == second.start;
            if second.start < first.end || same_insertion_point {
                return Err(ManifestError::OverlappingEdits {
                    first: first.clone(),
                    second: second.clone(),
                });
            }
        }
    }

    let mut output = Vec::with_capacity(source.len() + 128 * edits.len());
    let mut copied = 0;
    for (span, edit) in ordered {
        check_fits(source, &span, &edit.target)?;
        output.extend_from_slice(&source[copied..span.start]);
        output.extend_from_slice(replacement(source, edit).as_bytes());
        copied = span.end;
    }
    output.extend_from_slice(&source[copied..]);
    Ok(output)
}

/// Writes `value` as a YAML scalar in `style`, escaping as that style requires.
///
/// A value the style cannot carry (a plain scalar that would read as a number, a comment or
/// a mapping; a single-quoted one with a line break or control character) is written double
/// quoted instead: a changed quoting style is better than a changed value.
pub fn render_scalar(value: &str, style: ScalarStyle) -> String {
    match style {
        ScalarStyle::Plain if is_plain_safe(value) => value.to_string(),
        ScalarStyle::SingleQuoted if is_single_quote_safe(value) => {
            format!("'{}'", value.replace('\'', "''"))
        }
        ScalarStyle::Plain | ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => {
            double_quoted(value)
        }
    }
}

/// The bytes that replace the edit's span.
fn replacement(source: &[u8], edit: &Edit) -> String {
    match &edit.target {
        Target::Scalar { style, .. } => render_scalar(&edit.new_value, *style),
        Target::InsertKustomizeDigest {
            at,
            indent,
            flow: false,
        } => {
            let digest = render_scalar(&edit.new_value, ScalarStyle::Plain);
            format!("{}{indent}digest: {digest}", line_ending(source, *at))
        }
        Target::InsertKustomizeDigest { flow: true, .. } => {
            let digest = render_scalar(&edit.new_value, ScalarStyle::Plain);
            format!(", digest: {digest}")
        }
        Target::InsertHelmParameter { at, indent, name } => {
            let eol = line_ending(source, *at);
            let name = render_scalar(name, ScalarStyle::Plain);
            let value = render_scalar(&edit.new_value, ScalarStyle::Plain);
            format!("{eol}{indent}- name: {name}{eol}{indent}  value: {value}")
        }
    }
}

/// The line ending to use for a line inserted at `at`: the one already there, or, at the end
/// of a file without a final line break, the file's first one.
fn line_ending(source: &[u8], at: usize) -> &'static str {
    let here = source.get(at..).unwrap_or_default();
    let sample = if here.is_empty() {
        let first_newline = source.iter().position(|&b| b == b'\n');
        first_newline.map_or(&[][..], |n| &source[n.saturating_sub(1)..])
    } else {
        here
    };
    if sample.starts_with(b"\r\n") {
        "\r\n"
    } else {
        "\n"
    }
}

/// Refuses an edit whose span is outside the source, splits a character, or does not hold a
/// scalar of the recorded style: the file changed since it was scanned.
fn check_fits(source: &[u8], span: &Range<usize>, target: &Target) -> Result<(), ManifestError> {
    let mismatch = |reason: &str| ManifestError::EditMismatch {
        span: span.clone(),
        reason: reason.to_string(),
    };
    if span.end > source.len() || span.start > span.end {
        return Err(mismatch("outside the file"));
    }
    let on_boundary = |at: usize| source.get(at).is_none_or(|&b| (b as i8) >= -0x40);
    if !on_boundary(span.start) || !on_boundary(span.end) {
        return Err(mismatch("not on a character boundary"));
    }
    let Target::Scalar { style, .. } = target else {
        return Ok(());
    };
    let text = &source[span.clone()];
    let quoted_by =
        |quote: u8| text.len() >= 2 && text.first() == Some(&quote) && text.last() == Some(&quote);
    let fits = match style {
        ScalarStyle::Plain => {
            !text.is_empty() && !matches!(text.first(), Some(b'\'' | b'"' | b' ' | b'\t'))
        }
        ScalarStyle::SingleQuoted => quoted_by(b'\''),
        ScalarStyle::DoubleQuoted => quoted_by(b'"'),
    };
    if fits {
        Ok(())
    } else {
        Err(mismatch(&format!("not a {style:?} scalar")))
    }
}

/// Whether `value` can be written as a plain scalar anywhere (block or flow context) and read
/// back as the same string under both YAML 1.1 and 1.2 resolution. Conservative: image
/// references and digests pass, anything unusual gets quoted.
fn is_plain_safe(value: &str) -> bool {
    let Some(first) = value.chars().next() else {
        return false;
    };
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) || first.is_whitespace() {
        return false;
    }
    if value.ends_with(|c: char| c.is_whitespace() || c == ':') || value.starts_with("...") {
        return false;
    }
    if value
        .chars()
        .any(|c| c.is_control() || matches!(c, ',' | '[' | ']' | '{' | '}' | '\u{FEFF}'))
    {
        return false;
    }
    if value.contains(": ") || value.contains(" #") || value.contains(":\t") {
        return false;
    }
    !looks_like_non_string(value)
}

/// Plain scalars that YAML would read as null, a boolean or a number.
pub(super) fn looks_like_non_string(value: &str) -> bool {
    const WORDS: [&str; 12] = [
        "~", "null", "true", "false", "yes", "no", "on", "off", "y", "n", ".inf", ".nan",
    ];
    // No number, timestamp, boolean or null has a '/' or '@'; every pinned image reference
    // on a registry host such as 127.0.0.1:5000 does, and stays plain.
    if value.contains(['/', '@']) {
        return false;
    }
    let lower = value.to_ascii_lowercase();
    if WORDS.contains(&lower.as_str()) || lower == "<<" || lower == "=" {
        return true;
    }
    let unsigned = lower.trim_start_matches(['+', '-']);
    let mut chars = unsigned.chars();
    match chars.next() {
        Some(c) if c.is_ascii_digit() => reads_as_number_or_time(unsigned),
        Some('.') => matches!(chars.next(), Some(c) if c.is_ascii_digit()) || unsigned == ".inf",
        _ => false,
    }
}

/// Whether a plain scalar starting with a digit (sign removed, lowercased) is an integer, a
/// float, a sexagesimal number or a timestamp to some YAML reader (go-yaml, which Helm and
/// Kubernetes use, libyaml, PyYAML). Versions such as `1.2.3` and `1.27.3-debian-12-r5` and
/// hex digests are none of those, so they stay plain; `1.27`, `1e5`, `0x1f`, `1_000` and
/// `2024-01-01` do not.
fn reads_as_number_or_time(value: &str) -> bool {
    let bytes = value.as_bytes();
    if value.starts_with("0x") || value.starts_with("0o") || value.starts_with("0b") {
        return true;
    }
    // Sexagesimal (`1:30`) and anything with a colon: conservative.
    if value.contains(':') {
        return true;
    }
    // Timestamps start `YYYY-`.
    if bytes.len() >= 5 && bytes[..4].iter().all(u8::is_ascii_digit) && bytes[4] == b'-' {
        return true;
    }
    // Integers and floats: digits and underscores, at most one `.`, an optional exponent.
    let (mantissa, exponent) = match value.split_once('e') {
        Some((mantissa, exponent)) => (mantissa, Some(exponent)),
        None => (value, None),
    };
    let mantissa_ok = mantissa.matches('.').count() <= 1
        && mantissa
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'_' || b == b'.');
    let exponent_ok = exponent.is_none_or(|e| {
        let digits = e.trim_start_matches(['+', '-']);
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

fn is_single_quote_safe(value: &str) -> bool {
    !value
        .chars()
        .any(|c| (c.is_control() && c != '\t') || c == '\u{FEFF}')
        && !value.starts_with([' ', '\t'])
        && !value.ends_with([' ', '\t'])
}

fn double_quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if (c as u32) <= 0xFF && c.is_control() => {
                out.push_str(&format!("\\x{:02X}", c as u32));
            }
            c if c.is_control()
                || matches!(
                    c,
                    '\u{2028}' | '\u{2029}' | '\u{FEFF}' | '\u{FFFE}' | '\u{FFFF}'
                ) =>
            {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::super::scan::scan;
    use super::super::ImageField;
    use super::super::Origin;
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;

    #[test]
    fn an_image_on_a_numeric_registry_host_stays_plain() {
        let pinned = "127.0.0.1:5000/acme/web:1.0@sha256:ab";
        assert_eq!(render_scalar(pinned, ScalarStyle::Plain), pinned);
        assert_eq!(render_scalar("1.0", ScalarStyle::Plain), "\"1.0\"");
    }

    fn fields(path: &str, source: &[u8]) -> Vec<ImageField> {
        scan(Path::new(path), source)
            .unwrap_or_else(|error| panic!("{error}"))
            .fields
    }

    fn pin_all(path: &str, source: &[u8], new_value: &str) -> Vec<u8> {
        let edits: Vec<Edit> = fields(path, source)
            .into_iter()
            .map(|field| Edit {
                target: field.target,
                new_value: new_value.to_string(),
            })
            .collect();
        apply(source, &edits).unwrap_or_else(|error| panic!("{error}"))
    }

    /// `source` with every image found in it set to `new_value`.
    fn pinned(path: &str, source: &str, new_value: &str) -> String {
        String::from_utf8(pin_all(path, source.as_bytes(), new_value)).unwrap()
    }

    /// The kustomization `source` with `digest: sha256:abc` set on every image entry.
    fn with_digest(source: &str) -> String {
        pinned("kustomization.yaml", source, "sha256:abc")
    }

    fn scalar(span: Range<usize>, style: ScalarStyle, new_value: &str) -> Edit {
        Edit {
            target: Target::Scalar { span, style },
            new_value: new_value.to_string(),
        }
    }

    /// Parses `k: <scalar>` and returns the value the YAML parser reads.
    fn read_back(scalar: &str) -> String {
        let text = format!("k: {scalar}\n");
        let mut values = Vec::new();
        for event in saphyr_parser::Parser::new_from_str(&text) {
            match event {
                Ok((saphyr_parser::Event::Scalar(value, ..), _)) => values.push(value.into_owned()),
                Ok(_) => {}
                Err(error) => panic!("{text:?}: {error}"),
            }
        }
        assert_eq!(values.len(), 2, "{text:?}");
        values.swap_remove(1)
    }

    const POD: &str = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: nginx:1.27 # web\n";

    #[test]
    fn replaces_only_the_value_and_keeps_the_comment() {
        assert_eq!(
            pinned("pod.yaml", POD, "nginx:1.27@sha256:abc"),
            POD.replace("nginx:1.27 #", "nginx:1.27@sha256:abc #")
        );
    }

    #[test]
    fn no_edits_return_the_input_unchanged() {
        assert_eq!(
            apply(POD.as_bytes(), &[]).ok(),
            Some(POD.as_bytes().to_vec())
        );
    }

    #[test]
    fn an_edit_to_the_same_value_returns_the_input_unchanged() {
        let output = pin_all("pod.yaml", POD.as_bytes(), "nginx:1.27");
        assert_eq!(output, POD.as_bytes());
    }

    #[test]
    fn quoting_style_is_kept() {
        let source = "apiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: a, image: 'a:1'}, {name: b, image: \"b:1\"}]\n";
        assert_eq!(
            pinned("pod.yaml", source, "x:2@sha256:1"),
            source
                .replace("'a:1'", "'x:2@sha256:1'")
                .replace("\"b:1\"", "\"x:2@sha256:1\"")
        );
    }

    #[test]
    fn byte_order_mark_and_crlf_survive() {
        let source = format!("\u{feff}{}", POD.replace('\n', "\r\n"));
        assert_eq!(
            pinned("pod.yaml", &source, "nginx:1.27@sha256:abc"),
            source.replace("nginx:1.27 #", "nginx:1.27@sha256:abc #")
        );
    }

    #[test]
    fn edits_may_come_in_any_order() {
        let source = b"aaa bbb ccc";
        let edits = [
            scalar(8..11, ScalarStyle::Plain, "z"),
            scalar(0..3, ScalarStyle::Plain, "x"),
        ];
        assert_eq!(apply(source, &edits).ok(), Some(b"x bbb z".to_vec()));
    }

    #[test]
    fn overlapping_edits_are_refused() {
        let edits = [
            scalar(0..5, ScalarStyle::Plain, "x"),
            scalar(4..7, ScalarStyle::Plain, "y"),
        ];
        let error = apply(b"abcdefgh", &edits).unwrap_err();
        assert_eq!(error.to_string(), "edits overlap: bytes 0..5 and 4..7");
    }

    #[test]
    fn two_insertions_at_one_place_are_refused() {
        let insert = Edit {
            target: Target::InsertKustomizeDigest {
                at: 3,
                indent: String::new(),
                flow: true,
            },
            new_value: "sha256:1".into(),
        };
        let error = apply(b"{a: b}", &[insert.clone(), insert]).unwrap_err();
        assert!(
            matches!(error, ManifestError::OverlappingEdits { .. }),
            "{error}"
        );
    }

    #[test]
    fn an_edit_beyond_the_end_of_the_file_is_refused() {
        let error = apply(b"abc", &[scalar(2..9, ScalarStyle::Plain, "x")]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "edit at bytes 2..9 does not fit the source: outside the file"
        );
    }

    #[test]
    fn an_edit_whose_span_no_longer_holds_its_quoted_scalar_is_refused() {
        let error = apply(b"k: abc", &[scalar(3..6, ScalarStyle::DoubleQuoted, "x")]).unwrap_err();
        assert!(
            matches!(error, ManifestError::EditMismatch { .. }),
            "{error}"
        );
    }

    #[test]
    fn an_edit_splitting_a_character_is_refused() {
        let error = apply("k: é".as_bytes(), &[scalar(4..5, ScalarStyle::Plain, "x")]).unwrap_err();
        assert!(
            matches!(error, ManifestError::EditMismatch { .. }),
            "{error}"
        );
    }

    #[test]
    fn block_digest_insertion_adds_a_line_with_the_entry_indent() {
        let source = "images:\n  - name: nginx\n    newTag: \"1.27\"  # note\n  - name: redis\n";
        assert_eq!(
            with_digest(source),
            "images:\n  - name: nginx\n    newTag: \"1.27\"  # note\n    digest: sha256:abc\n  - name: redis\n"
        );
    }

    #[test]
    fn block_digest_insertion_uses_crlf_in_a_crlf_file() {
        let source = "images:\r\n- name: nginx\r\n  newTag: \"1.27\"\r\n";
        assert_eq!(
            with_digest(source),
            "images:\r\n- name: nginx\r\n  newTag: \"1.27\"\r\n  digest: sha256:abc\r\n"
        );
    }

    #[test]
    fn block_digest_insertion_at_end_of_file_without_newline_uses_the_file_line_ending() {
        let source = "images:\r\n- name: nginx\r\n  newTag: \"1.27\"";
        assert_eq!(
            with_digest(source),
            "images:\r\n- name: nginx\r\n  newTag: \"1.27\"\r\n  digest: sha256:abc"
        );
    }

    #[test]
    fn flow_digest_insertion_adds_a_pair_after_the_last_value() {
        let source = "images: [{name: nginx, newTag: \"1.27\"}, {name: b, newTag: '2' , }]\n";
        assert_eq!(
            with_digest(source),
            "images: [{name: nginx, newTag: \"1.27\", digest: sha256:abc}, {name: b, newTag: '2', digest: sha256:abc , }]\n"
        );
    }

    #[test]
    fn inserted_digests_are_found_by_a_second_scan() {
        let source = "images:\n- name: nginx\n  newTag: \"1.27\"\n- {name: b, newTag: '2'}\n";
        let output = pin_all("kustomization.yaml", source.as_bytes(), "sha256:abc");
        let again = fields("kustomization.yaml", &output);
        assert_eq!(again.len(), 2);
        for field in again {
            assert!(
                matches!(&field.origin, Origin::KustomizeImage { current_digest: Some(d), .. } if d == "sha256:abc")
            );
        }
    }

    #[test]
    fn plain_values_stay_plain() {
        assert_eq!(
            render_scalar("registry:5000/a/b:1.2@sha256:ab", ScalarStyle::Plain),
            "registry:5000/a/b:1.2@sha256:ab"
        );
    }

    #[test]
    fn versions_and_hex_digests_that_no_yaml_reader_takes_for_numbers_stay_plain() {
        for value in [
            "1.2.3",
            "1.27.3-debian-12-r5",
            "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9",
            "3.1.4-alpine",
        ] {
            assert_eq!(render_scalar(value, ScalarStyle::Plain), value);
            assert_eq!(read_back(value), value);
        }
        for value in [
            "1.27",
            "1e5",
            "12E+3",
            "0x1f",
            "0o17",
            "1_000",
            "2024-01-01",
            "1:30",
        ] {
            let rendered = render_scalar(value, ScalarStyle::Plain);
            assert!(rendered.starts_with('"'), "{value:?} -> {rendered}");
        }
    }

    #[test]
    fn plain_values_that_would_change_meaning_are_double_quoted() {
        for value in [
            "", "1.27", "true", "null", "a: b", "a #b", "[x]", "-x", " x", "x:", "a,b", "...", "~",
        ] {
            let rendered = render_scalar(value, ScalarStyle::Plain);
            assert!(rendered.starts_with('"'), "{value:?} -> {rendered}");
            assert_eq!(read_back(&rendered), value);
        }
    }

    #[test]
    fn single_quotes_double_an_inner_quote() {
        assert_eq!(render_scalar("it's", ScalarStyle::SingleQuoted), "'it''s'");
    }

    #[test]
    fn single_quoted_values_with_line_breaks_fall_back_to_double_quotes() {
        assert_eq!(
            render_scalar("a\nb", ScalarStyle::SingleQuoted),
            "\"a\\nb\""
        );
    }

    #[test]
    fn double_quotes_escape_backslash_quote_and_controls() {
        assert_eq!(
            render_scalar("a\"b\\c\td\u{1}\u{2028}", ScalarStyle::DoubleQuoted),
            "\"a\\\"b\\\\c\\td\\x01\\u2028\""
        );
    }

    /// One generated container image: how it is written and what it means.
    #[derive(Debug, Clone)]
    struct Image {
        /// Tag and anchor before the value; not part of its span.
        properties: &'static str,
        written: String,
        comment: Option<String>,
    }

    fn image_strategy() -> impl Strategy<Value = Image> {
        let reference = "([a-z]{1,6}\\.[a-z]{2,3}(:[0-9]{2,4})?/)?[a-z0-9]{1,8}(/[a-z0-9_-]{1,6})?(:[a-zA-Z0-9._-]{1,8})?(@sha256:[0-9a-f]{64})?";
        let comment = proptest::option::of("[ -~é€😀☃]{0,16}");
        let properties = prop_oneof![Just(""), Just("!!str "), Just("&img "), Just("&img !!str ")];
        (reference, 0..3usize, comment, properties).prop_map(
            |(reference, quoting, comment, properties)| {
                let written = match quoting {
                    0 => reference,
                    1 => format!("'{reference}'"),
                    _ => format!("\"{reference}\""),
                };
                Image {
                    properties,
                    written,
                    comment,
                }
            },
        )
    }

    #[derive(Debug, Clone)]
    struct Manifest {
        text: String,
        /// The written images, in the order they appear.
        images: Vec<String>,
    }

    fn manifest_strategy() -> impl Strategy<Value = Manifest> {
        (
            proptest::collection::vec(image_strategy(), 1..5),
            prop_oneof![Just(2usize), Just(4)],
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            "[ -~é😀]{0,20}",
        )
            .prop_map(
                |(images, indent, flow, crlf, bom, extra_document, header)| {
                    let i = |n: usize| " ".repeat(indent * n);
                    let mut text = String::new();
                    if bom {
                        text.push('\u{feff}');
                    }
                    text.push_str(&format!("# {header}\n"));
                    if extra_document {
                        text.push_str("apiVersion: v1\nkind: ConfigMap\ndata:\n");
                        text.push_str(&format!("{}image: 'not:me' # {header}\n---\n", i(1)));
                    }
                    text.push_str("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n");
                    text.push_str(&format!(
                        "{}name: web # {header}\nspec:\n{}template:\n",
                        i(1),
                        i(1)
                    ));
                    text.push_str(&format!("{}spec:\n", i(2)));
                    if flow {
                        let items: Vec<String> = images
                            .iter()
                            .enumerate()
                            .map(|(n, image)| {
                                format!(
                                    "{{name: c{n}, image: {}{}}}",
                                    image.properties, image.written
                                )
                            })
                            .collect();
                        text.push_str(&format!("{}containers: [{}]\n", i(3), items.join(", ")));
                    } else {
                        text.push_str(&format!("{}containers:\n", i(3)));
                        for (n, image) in images.iter().enumerate() {
                            text.push_str(&format!("{}- name: c{n}\n", i(3)));
                            text.push_str(&format!(
                                "{}  image: {}{}",
                                i(3),
                                image.properties,
                                image.written
                            ));
                            if let Some(comment) = &image.comment {
                                text.push_str(&format!("  # {comment}"));
                            }
                            text.push('\n');
                        }
                    }
                    if crlf {
                        text = text.replace('\n', "\r\n");
                    }
                    Manifest {
                        text,
                        images: images.into_iter().map(|image| image.written).collect(),
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn field_spans_slice_to_the_images_as_written(manifest in manifest_strategy()) {
            let found = fields("web.yaml", manifest.text.as_bytes());
            let written: Vec<&str> = found
                .iter()
                .map(|field| &manifest.text[field.target.span()])
                .collect();
            prop_assert_eq!(written, manifest.images.iter().map(String::as_str).collect::<Vec<_>>());
        }

        #[test]
        fn a_rewrite_changes_nothing_outside_the_value_spans(
            manifest in manifest_strategy(),
            new_values in proptest::collection::vec(any::<String>(), 5),
        ) {
            let source = manifest.text.as_bytes();
            let found = fields("web.yaml", source);
            let edits: Vec<Edit> = found
                .iter()
                .zip(new_values.iter())
                .map(|(field, value)| Edit { target: field.target.clone(), new_value: value.clone() })
                .collect();
            let output = apply(source, &edits).map_err(|e| TestCaseError::fail(e.to_string()))?;

            // Rebuild the expected output from the untouched pieces and the rendered values.
            let mut expected = Vec::new();
            let mut copied = 0;
            for edit in &edits {
                let span = edit.target.span();
                let Target::Scalar { style, .. } = &edit.target else { continue };
                expected.extend_from_slice(&source[copied..span.start]);
                expected.extend_from_slice(render_scalar(&edit.new_value, *style).as_bytes());
                copied = span.end;
            }
            expected.extend_from_slice(&source[copied..]);
            prop_assert_eq!(&output, &expected);

            // And the new values read back exactly.
            let again: Vec<String> = fields("web.yaml", &output).into_iter().map(|f| f.value).collect();
            let wanted: Vec<String> = new_values.iter().take(edits.len()).cloned().collect();
            // Empty values are reported as skipped, not as fields.
            let wanted: Vec<String> = wanted.into_iter().filter(|v| !v.is_empty()).collect();
            prop_assert_eq!(again, wanted);
        }

        #[test]
        fn rendered_scalars_read_back_as_the_same_value(
            value in any::<String>(),
            style in prop_oneof![Just(ScalarStyle::Plain), Just(ScalarStyle::SingleQuoted), Just(ScalarStyle::DoubleQuoted)],
        ) {
            let rendered = render_scalar(&value, style);
            prop_assert_eq!(read_back(&rendered), value);
        }
    }
}
