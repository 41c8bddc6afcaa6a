//! No import circles between tagpin's modules (issue #27).
//!
//! A circle hides where a thing belongs: when `output` needs `cli` and `cli` needs `output`,
//! neither can be read, tested or moved alone. The test reads `src/**/*.rs`, takes each file
//! as one module (`mod.rs`, or `x.rs` beside a directory `x/`, is its directory's module) and
//! draws an edge for every path that names another file's module: `use crate::…`,
//! `use super::…`, inline `crate::x::y`, `super::y`, a child declared with `mod y;` and named
//! as `y::…`, and the names a `use` brought in. A parent and its child that name each other
//! are a circle too. Comments, string literals and `#[cfg(test)]` items are not read: doc
//! links and tests create no dependency of the product.
//!
//! The circles that exist today are listed in [`KNOWN_CIRCLES`] by the reference that closes
//! each and the move that will remove it; any other circle fails the test, naming the files
//! and the lines that make it. A listed reference that no longer closes a circle fails too,
//! so the list only ever shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The references that close today's circles, `(from, to, the move that removes it)`: none
/// since issue #27 broke the last. A circle that cannot be broken at once is listed here with
/// the move that will remove it; removing the reference then asks for the entry to go.
const KNOWN_CIRCLES: &[(&str, &str, &str)] = &[];

/// One module per file: `src/registry/mod.rs` is `registry`, `src/config/raw.rs` is
/// `config/raw`. `None` for the crate roots, which only declare modules (`lib.rs`) or belong
/// to another crate (`main.rs`, the binary).
fn module_of(relative: &Path) -> Option<String> {
    let text = relative.to_str()?.strip_suffix(".rs")?.replace('\\', "/");
    if text == "lib" || text == "main" {
        return None;
    }
    Some(text.strip_suffix("/mod").unwrap_or(&text).to_string())
}

/// The code with comments and the contents of string and character literals blanked, line
/// breaks kept so that offsets still give line numbers.
fn strip_comments_and_literals(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let before_is_ident = i > 0 && ident(chars[i - 1]);
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
            continue;
        }
        // Raw strings: r"…", r#"…"#, br#"…"#.
        let raw_start = match (c, next) {
            ('r', _) if !before_is_ident => Some(i + 1),
            ('b', Some('r')) if !before_is_ident => Some(i + 2),
            _ => None,
        };
        if let Some(mut j) = raw_start {
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                out.push_str("\"\"");
                j += 1;
                loop {
                    match chars.get(j) {
                        None => break,
                        Some('"') if (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) => {
                            j += 1 + hashes;
                            break;
                        }
                        Some(&other) => {
                            if other == '\n' {
                                out.push('\n');
                            }
                            j += 1;
                        }
                    }
                }
                i = j;
                continue;
            }
        }
        if c == '"' {
            out.push_str("\"\"");
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let escaped = chars[i] == '\\';
                if chars[i] == '\n' || (escaped && chars.get(i + 1) == Some(&'\n')) {
                    out.push('\n');
                }
                i += if escaped { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}'); otherwise a lifetime, kept.
            if next == Some('\\') {
                // Past the backslash and the character it escapes (`'\''`).
                let mut j = i + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                out.push_str("' '");
                i = j + 1;
                continue;
            }
            if chars.get(i + 2) == Some(&'\'') {
                out.push_str("' '");
                i += 3;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The code with every `#[cfg(test)]` item blanked (a test module, function or `use`), and
/// the names of the child modules declared under `#[cfg(test)]` (`mod fixtures;`), whose
/// files are test code too.
fn without_test_items(code: &str) -> (String, BTreeSet<String>) {
    let mut code: Vec<char> = code.chars().collect();
    let mut test_children = BTreeSet::new();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= code.len() {
        if code[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        let start = i;
        let mut j = i + marker.len();
        // Further attributes of the same item.
        loop {
            while j < code.len() && code[j].is_whitespace() {
                j += 1;
            }
            if code.get(j) == Some(&'#') {
                while j < code.len() && code[j] != ']' {
                    j += 1;
                }
                j += 1;
            } else {
                break;
            }
        }
        let item: String = code[j..code.len().min(j + 200)].iter().collect();
        let words: Vec<&str> = item
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .take(6)
            .collect();
        // The item ends at a `;` outside brackets, or at the `}` closing its first `{`.
        let (mut depth, mut end) = (0i32, code.len());
        let mut k = j;
        while k < code.len() {
            match code[k] {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => {
                    end = k + 1;
                    if let Some(pos) = words.iter().position(|w| *w == "mod") {
                        if let Some(name) = words.get(pos + 1) {
                            test_children.insert(name.to_string());
                        }
                    }
                    break;
                }
                '{' if depth == 0 => {
                    end = (closing_brace(&code, k) + 1).min(code.len());
                    break;
                }
                _ => {}
            }
            k += 1;
        }
        for c in &mut code[start..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = end;
    }
    (code.into_iter().collect(), test_children)
}

/// The offset of the `}` closing the `{` at `open` (the end of the code if none does).
fn closing_brace(code: &[char], open: usize) -> usize {
    let mut braces = 0;
    for (k, c) in code.iter().enumerate().skip(open) {
        match c {
            '{' => braces += 1,
            '}' => {
                braces -= 1;
                if braces == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A path as written (`super::images::read`) and where: its line.
#[derive(Debug, Clone)]
struct Written {
    segments: Vec<String>,
    line: usize,
    /// Inline `mod x { … }` blocks around it: that many leading `super`s stay in the file.
    inline_depth: usize,
}

/// The leaves of a `use` tree: `crate::{a, b::{self, C as D}}` gives `crate::a`, `crate::b`
/// (named `b`) and `crate::b::C` (named `D`). A glob (`super::*`) names nothing.
fn use_leaves(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = tree.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".to_string());
            i += 2;
        } else if is_ident_char(c) {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    let mut leaves = Vec::new();
    let mut position = 0;
    parse_use_tree(&tokens, &mut position, &mut Vec::new(), &mut leaves);
    leaves
}

fn parse_use_tree(
    tokens: &[String],
    at: &mut usize,
    prefix: &mut Vec<String>,
    leaves: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let depth = prefix.len();
    loop {
        match tokens.get(*at).map(String::as_str) {
            Some("::") => *at += 1,
            Some("{") => {
                *at += 1;
                loop {
                    parse_use_tree(tokens, at, prefix, leaves);
                    match tokens.get(*at).map(String::as_str) {
                        Some(",") => *at += 1,
                        Some("}") => {
                            *at += 1;
                            break;
                        }
                        _ => break,
                    }
                    if tokens.get(*at).map(String::as_str) == Some("}") {
                        *at += 1;
                        break;
                    }
                }
                prefix.truncate(depth);
                return;
            }
            Some("*") => {
                *at += 1;
                leaves.push((prefix.clone(), None));
                prefix.truncate(depth);
                return;
            }
            Some("self") if prefix.len() > depth || depth > 0 => {
                *at += 1;
                let name = prefix.last().cloned();
                let alias = alias_after(tokens, at).or(name);
                leaves.push((prefix.clone(), alias));
                prefix.truncate(depth);
                return;
            }
            Some(word) if word.chars().all(is_ident_char) => {
                prefix.push(word.to_string());
                *at += 1;
                if tokens.get(*at).map(String::as_str) != Some("::") {
                    let alias = alias_after(tokens, at).or_else(|| Some(word.to_string()));
                    leaves.push((prefix.clone(), alias));
                    prefix.truncate(depth);
                    return;
                }
            }
            _ => {
                prefix.truncate(depth);
                return;
            }
        }
    }
}

fn alias_after(tokens: &[String], at: &mut usize) -> Option<String> {
    if tokens.get(*at).map(String::as_str) == Some("as") {
        *at += 2;
        return tokens.get(*at - 1).cloned().filter(|name| name != "_");
    }
    None
}

/// Every path of a file's code that may name a module: the leaves of its `use` items, and
/// the paths of two or more segments elsewhere. Also the names its `use`s bring in.
fn written_paths(code: &str) -> (Vec<Written>, BTreeMap<String, Vec<String>>) {
    let chars: Vec<char> = code.chars().collect();
    let mut lines = Vec::with_capacity(chars.len() + 1);
    let mut line = 1;
    for c in &chars {
        lines.push(line);
        if *c == '\n' {
            line += 1;
        }
    }
    lines.push(line);
    let line_of = |offset: usize| lines[offset];
    // Inline module blocks, as (start, end) offsets.
    let mut inline = Vec::new();
    let mut i = 0;
    while let Some(found) = find_word(&chars, "mod", i) {
        i = found + 3;
        let mut j = i;
        while j < chars.len() && (chars[j].is_whitespace() || is_ident_char(chars[j])) {
            j += 1;
        }
        if chars.get(j) == Some(&'{') {
            inline.push((j, closing_brace(&chars, j)));
        }
    }
    let depth_at = |offset: usize| {
        inline
            .iter()
            .filter(|(start, end)| *start < offset && offset < *end)
            .count()
    };

    let mut written = Vec::new();
    let mut aliases = BTreeMap::new();
    let mut rest = chars.clone();
    let mut i = 0;
    while let Some(found) = find_word(&chars, "use", i) {
        let Some(end) = chars[found..].iter().position(|c| *c == ';') else {
            break;
        };
        let end = found + end;
        let tree: String = chars[found + 3..end].iter().collect();
        for (segments, alias) in use_leaves(&tree) {
            if let Some(alias) = alias {
                aliases.insert(alias, segments.clone());
            }
            written.push(Written {
                segments,
                line: line_of(found),
                inline_depth: depth_at(found),
            });
        }
        for c in &mut rest[found..=end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = end;
    }
    // Paths elsewhere: `a::b` not preceded by `::`, an identifier or `$` (`$crate`).
    let mut i = 0;
    while i < rest.len() {
        let starts = is_ident_char(rest[i])
            && (i == 0 || !(is_ident_char(rest[i - 1]) || rest[i - 1] == '$'));
        let after_colons = i >= 2 && rest[i - 1] == ':' && rest[i - 2] == ':';
        if !starts || after_colons {
            i += 1;
            continue;
        }
        let start = i;
        let mut segments = Vec::new();
        loop {
            let word_start = i;
            while i < rest.len() && is_ident_char(rest[i]) {
                i += 1;
            }
            segments.push(rest[word_start..i].iter().collect::<String>());
            if rest.get(i) == Some(&':')
                && rest.get(i + 1) == Some(&':')
                && rest.get(i + 2).is_some_and(|c| is_ident_char(*c))
            {
                i += 2;
            } else {
                break;
            }
        }
        if segments.len() > 1 {
            written.push(Written {
                segments,
                line: line_of(start),
                inline_depth: depth_at(start),
            });
        }
    }
    (written, aliases)
}

fn find_word(chars: &[char], word: &str, from: usize) -> Option<usize> {
    let word: Vec<char> = word.chars().collect();
    (from..chars.len().saturating_sub(word.len() - 1)).find(|&i| {
        chars[i..i + word.len()] == word[..]
            && (i == 0 || !is_ident_char(chars[i - 1]))
            && chars.get(i + word.len()).is_none_or(|c| !is_ident_char(*c))
    })
}

/// Which file a reference goes to, and the line that makes it.
type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// The module graph of `files` (module -> source text): for each module, the other modules
/// it names, each with the first place it does (`src/output.rs:27 crate::cli::OutputFormat`).
fn module_graph(files: &BTreeMap<String, (String, String)>) -> Edges {
    let modules: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    let mut cleaned = BTreeMap::new();
    let mut test_only = BTreeSet::new();
    for (module, (_, source)) in files {
        let (code, test_children) = without_test_items(&strip_comments_and_literals(source));
        for child in test_children {
            test_only.insert(format!("{module}/{child}"));
        }
        cleaned.insert(module.clone(), code);
    }
    let mut edges = Edges::new();
    for (module, code) in &cleaned {
        if test_only.contains(module) {
            continue;
        }
        let (file, _) = &files[module];
        let me: Vec<String> = module.split('/').map(str::to_string).collect();
        let children: BTreeSet<String> = declared_children(code);
        let (written, aliases) = written_paths(code);
        let targets = edges.entry(module.clone()).or_default();
        for path in written {
            let Some(absolute) = absolute(&me, &path, &children, &aliases, 0) else {
                continue;
            };
            // The longest prefix that is a file's module.
            let Some(target) = (1..=absolute.len())
                .rev()
                .map(|n| absolute[..n].join("/"))
                .find(|m| modules.contains(m.as_str()))
            else {
                continue;
            };
            if target != *module && !test_only.contains(&target) {
                targets.entry(target).or_insert_with(|| {
                    format!("{file}:{} {}", path.line, path.segments.join("::"))
                });
            }
        }
    }
    edges
}

/// `mod x;` declarations: the file's child modules.
fn declared_children(code: &str) -> BTreeSet<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut children = BTreeSet::new();
    let mut i = 0;
    while let Some(found) = find_word(&chars, "mod", i) {
        i = found + 3;
        let rest: String = chars[i..chars.len().min(i + 100)].iter().collect();
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|c| is_ident_char(*c))
            .collect();
        if rest.trim_start()[name.len()..]
            .trim_start()
            .starts_with(';')
        {
            children.insert(name);
        }
    }
    children
}

/// A written path as a path from the crate root, or `None` when it does not start in the
/// crate (a dependency, `std`, a local variable's type).
fn absolute(
    me: &[String],
    path: &Written,
    children: &BTreeSet<String>,
    aliases: &BTreeMap<String, Vec<String>>,
    hops: usize,
) -> Option<Vec<String>> {
    let segments = &path.segments;
    let first = segments.first()?.as_str();
    match first {
        "crate" => Some(segments[1..].to_vec()),
        "super" | "self" => {
            let mut base = me.to_vec();
            let mut inline = path.inline_depth;
            let mut rest = &segments[..];
            while let Some(head) = rest.first().map(String::as_str) {
                match head {
                    "super" if inline > 0 => inline -= 1,
                    "super" => {
                        base.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
            if inline > 0 {
                // Still inside this file's inline module.
                return None;
            }
            base.extend(rest.iter().cloned());
            Some(base)
        }
        _ if children.contains(first) => {
            let mut base = me.to_vec();
            base.extend(segments.iter().cloned());
            Some(base)
        }
        _ => {
            let target = aliases.get(first)?;
            if hops > 8 || target.first().map(String::as_str) == Some(first) {
                return None;
            }
            let expanded = Written {
                segments: target.iter().chain(&segments[1..]).cloned().collect(),
                ..path.clone()
            };
            absolute(me, &expanded, children, aliases, hops + 1)
        }
    }
}

/// The groups of modules that reach each other once the `allowed` references are taken out:
/// each is a circle no entry explains.
fn circles(edges: &Edges, allowed: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let kept = |from: &String, to: &String| !allowed.contains(&(from.clone(), to.clone()));
    let nodes: Vec<&String> = edges.keys().collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(node) = stack.pop() {
            for to in edges.get(&node).into_iter().flat_map(BTreeMap::keys) {
                if kept(&node, to) && seen.insert(to.clone()) {
                    stack.push(to.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut grouped = BTreeSet::new();
    let mut groups = Vec::new();
    for node in &nodes {
        if grouped.contains(*node) || !reachable[node].contains(*node) {
            continue;
        }
        let group: Vec<String> = nodes
            .iter()
            .filter(|other| reachable[node].contains(**other) && reachable[*other].contains(*node))
            .map(|other| other.to_string())
            .collect();
        grouped.extend(group.iter().cloned());
        groups.push(group);
    }
    groups
}

/// Whether `from -> to` lies on a circle: `from` still names `to`, and `to` reaches `from`.
fn closes_a_circle(edges: &Edges, from: &str, to: &str) -> bool {
    // The reference itself must still be there, and `to` must reach back to `from`.
    if !edges
        .get(from)
        .is_some_and(|targets| targets.contains_key(to))
    {
        return false;
    }
    let mut seen = BTreeSet::new();
    let mut stack = vec![to.to_string()];
    while let Some(node) = stack.pop() {
        if node == from {
            return true;
        }
        for next in edges.get(&node).into_iter().flat_map(BTreeMap::keys) {
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    false
}

fn describe(edges: &Edges, group: &[String]) -> String {
    let mut text = format!("circle: {}\n", group.join(", "));
    for from in group {
        for (to, place) in edges.get(from).into_iter().flatten() {
            if group.contains(to) {
                text.push_str(&format!("    {from} -> {to}  ({place})\n"));
            }
        }
    }
    text
}

fn read_sources(dir: &Path, root: &Path, files: &mut BTreeMap<String, (String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            read_sources(&path, root, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under src");
            if let Some(module) = module_of(relative) {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let shown = format!("src/{}", relative.display());
                files.insert(module, (shown, text));
            }
        }
    }
}

#[test]
fn no_import_circle_but_the_known_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    read_sources(&src, &src, &mut files);
    let edges = module_graph(&files);
    let allowed: BTreeSet<(String, String)> = KNOWN_CIRCLES
        .iter()
        .map(|(from, to, _)| (from.to_string(), to.to_string()))
        .collect();

    let mut problems = String::new();
    for group in circles(&edges, &allowed) {
        problems.push_str(&describe(&edges, &group));
    }
    for (from, to, _) in KNOWN_CIRCLES {
        if !closes_a_circle(&edges, from, to) {
            problems.push_str(&format!(
                "{from} -> {to} no longer closes a circle: remove it from KNOWN_CIRCLES\n"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "import circles between modules (module = file; see tests/it/module_graph.rs):\n\
         {problems}every circle today, known or not:\n{}",
        circles(&edges, &BTreeSet::new())
            .iter()
            .map(|group| describe(&edges, group))
            .collect::<String>()
    );
}

/// Builds the graph of made-up files, `(path under src, text)`.
fn graph_of(sources: &[(&str, &str)]) -> Edges {
    let files = sources
        .iter()
        .map(|(path, text)| {
            let module = module_of(Path::new(path)).expect("a module");
            (module, (format!("src/{path}"), text.to_string()))
        })
        .collect();
    module_graph(&files)
}

fn targets(edges: &Edges, module: &str) -> Vec<String> {
    edges
        .get(module)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn a_parent_and_a_child_naming_each_other_are_a_circle() {
    let edges = graph_of(&[
        (
            "shop/mod.rs",
            "mod till;\npub struct Price;\nfn f() { till::ring(); }\n",
        ),
        ("shop/till.rs", "use super::Price;\npub fn ring() {}\n"),
        ("ledger.rs", "use crate::shop;\n"),
    ]);
    assert_eq!(targets(&edges, "shop"), ["shop/till"]);
    assert_eq!(targets(&edges, "shop/till"), ["shop"]);
    assert_eq!(
        circles(&edges, &BTreeSet::new()),
        [vec!["shop".to_string(), "shop/till".to_string()]]
    );
    let allowed = BTreeSet::from([("shop/till".to_string(), "shop".to_string())]);
    assert!(circles(&edges, &allowed).is_empty());
    assert!(closes_a_circle(&edges, "shop/till", "shop"));
    assert!(!closes_a_circle(&edges, "ledger", "shop"));
    // The till takes Price from a file of its own: the parent still reaches the till, but the
    // listed reference is gone, so the entry must go too.
    let moved = graph_of(&[
        (
            "shop/mod.rs",
            "mod price;\nmod till;\npub use price::Price;\nfn f() { till::ring(); }\n",
        ),
        ("shop/price.rs", "pub struct Price;\n"),
        (
            "shop/till.rs",
            "use super::price::Price;\npub fn ring() {}\n",
        ),
    ]);
    assert!(circles(&moved, &BTreeSet::new()).is_empty());
    assert!(!closes_a_circle(&moved, "shop/till", "shop"));
}

#[test]
fn use_trees_aliases_and_inline_paths_reach_the_file_they_name() {
    let edges = graph_of(&[
        (
            "a.rs",
            "use crate::{b::{self, c::{Thing as Other}}, d};\nfn f() { b::e::go(); }\n",
        ),
        ("b/mod.rs", "pub mod c;\npub mod e;\n"),
        ("b/c.rs", "pub struct Thing;\n"),
        ("b/e.rs", "pub fn go() { crate::f::h(); }\n"),
        ("d.rs", ""),
        (
            "f.rs",
            "pub fn h() { super::g::x(); let _: std::fmt::Error; }\n",
        ),
        ("g.rs", ""),
    ]);
    assert_eq!(targets(&edges, "a"), ["b", "b/c", "b/e", "d"]);
    assert_eq!(targets(&edges, "b/e"), ["f"]);
    assert_eq!(targets(&edges, "f"), ["g"]);
    assert_eq!(
        targets(&edges, "b"),
        Vec::<String>::new(),
        "`pub mod` alone is no reference"
    );
}

#[test]
fn comments_strings_and_test_items_make_no_reference() {
    let edges = graph_of(&[
        (
            "x.rs",
            "//! See [`crate::y`].\n\
             /* crate::y::Z */\n\
             fn f() -> &'static str { let _c = ['\"', '\\'', '{']; \"crate::y::z\" }\n\
             const R: &str = r#\"use crate::y;\"#;\n\
             #[cfg(test)]\n\
             #[allow(dead_code)]\n\
             pub(crate) mod tests { use crate::y; fn g() { super::super::y::h(); } }\n\
             #[cfg(test)]\n\
             use crate::y::Z;\n",
        ),
        ("y.rs", "use crate::x;\n"),
    ]);
    assert_eq!(targets(&edges, "x"), Vec::<String>::new());
    assert!(circles(&edges, &BTreeSet::new()).is_empty());
}

#[test]
fn super_inside_an_inline_module_starts_from_that_module() {
    let edges = graph_of(&[
        ("p/mod.rs", "pub mod q;\n"),
        (
            "p/q.rs",
            "mod inner { use super::Local; fn f() { super::super::r(); } }\nstruct Local;\n",
        ),
    ]);
    assert_eq!(targets(&edges, "p/q"), ["p"]);
}

/// Each `Result<…, String>` written in `code` (comments, literals and test items blanked), by
/// line: an error that is only text loses its cause and cannot be matched on.
fn string_errors(code: &str) -> Vec<usize> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = find_word(&chars, "Result", from) {
        from = at + 1;
        let mut k = at + "Result".len();
        while k < chars.len() && chars[k].is_whitespace() {
            k += 1;
        }
        if chars.get(k) != Some(&'<') {
            continue;
        }
        // The arguments up to the matching `>`, split at top-level commas.
        let (mut depth, mut args, mut current) = (0, Vec::new(), String::new());
        for &c in &chars[k..] {
            match c {
                '<' | '(' | '[' => {
                    depth += 1;
                    if depth == 1 {
                        continue;
                    }
                }
                '>' | ')' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        args.push(std::mem::take(&mut current));
                        break;
                    }
                }
                ',' if depth == 1 => {
                    args.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        if args.len() == 2 && args[1].split_whitespace().collect::<String>() == "String" {
            found.push(chars[..at].iter().filter(|c| **c == '\n').count() + 1);
        }
    }
    found
}

/// Each function in `code` (comments, literals and test items blanked) longer than `limit`
/// lines, from its `fn` line to its closing brace: `(name, first line, lines)`.
fn long_functions(code: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let line_of = |at: usize| chars[..at].iter().filter(|c| **c == '\n').count() + 1;
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = find_word(&chars, "fn", from) {
        from = at + 2;
        let name: String = chars[at + 2..]
            .iter()
            .skip_while(|c| c.is_whitespace())
            .take_while(|c| is_ident_char(**c))
            .collect();
        // `fn(K) -> T`, a function pointer type, has no name.
        if name.is_empty() || !chars[at + 2].is_whitespace() {
            continue;
        }
        let Some(open) = chars[at..].iter().position(|c| *c == '{' || *c == ';') else {
            break;
        };
        if chars[at + open] == ';' {
            continue;
        }
        let close = closing_brace(&chars, at + open);
        let lines = line_of(close.min(chars.len() - 1)) - line_of(at) + 1;
        if lines > limit {
            found.push((name, line_of(at), lines));
        }
    }
    found
}

/// The code of every file under src/ as the checks read it: comments, literals and test items
/// blanked, line breaks kept.
fn production_code() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    read_sources(&src, &src, &mut files);
    files
        .into_values()
        .map(|(shown, text)| {
            (
                shown,
                without_test_items(&strip_comments_and_literals(&text)).0,
            )
        })
        .collect()
}

#[test]
fn no_error_is_a_bare_string() {
    let found: Vec<String> = production_code()
        .iter()
        .flat_map(|(file, code)| {
            string_errors(code)
                .into_iter()
                .map(move |line| format!("{file}:{line}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "Result<_, String> loses the error's cause; use an error enum with #[source]:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_production_function_is_longer_than_100_lines() {
    let found: Vec<String> = production_code()
        .iter()
        .flat_map(|(file, code)| {
            long_functions(code, 100)
                .into_iter()
                .map(move |(name, line, lines)| format!("{file}:{line} {name}: {lines} lines"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "split these into steps:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_structure_checks_find_what_they_look_for() {
    let code = "fn a() -> Result<(), String> { Ok(()) }\n\
                fn b() -> Result<Vec<u8>, std::io::Error> { todo() }\n\
                type T = Result<BTreeMap<String, String>, String>;\n\
                fn c(f: fn(u8) -> Result<u8, String>) {}\n";
    assert_eq!(string_errors(code), vec![1, 3, 4]);
    let long = format!(
        "fn long() {{\n{}}}\nfn short() {{}}\nfn decl();\n",
        "x;\n".repeat(5)
    );
    assert_eq!(long_functions(&long, 6), vec![("long".to_string(), 1, 7)]);
    assert!(long_functions(&long, 7).is_empty());
}

/// Whether `code` names the crate `name` as a path (`name::…`, `use name`), not as part of a
/// longer word (`kubelet`, `k8s_openapi`).
fn names_crate(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = &code[at + name.len()..];
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && (after.starts_with("::") || after.starts_with(';') || after.starts_with(" as "))
    })
}

#[test]
fn the_judge_reads_no_cluster_and_the_operator_runs_no_daemon_code() {
    let kube_in_judge: Vec<String> = production_code()
        .into_iter()
        .filter(|(file, code)| file.starts_with("src/verify/judge/") && names_crate(code, "kube"))
        .map(|(file, _)| file)
        .collect();
    assert!(
        kube_in_judge.is_empty(),
        "verify/judge is pure: these read the cluster, which belongs in verify/observe: {kube_in_judge:?}"
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    read_sources(&src, &src, &mut files);
    let edges = module_graph(&files);
    let into_daemon: Vec<String> = edges
        .iter()
        .filter(|(from, _)| from.starts_with("operator"))
        .flat_map(|(from, to)| {
            to.keys()
                .filter(|t| t.as_str() == "daemon" || t.starts_with("daemon/"))
                .map(move |t| format!("{from} -> {t}"))
        })
        .collect();
    assert!(
        into_daemon.is_empty(),
        "the operator shares modules with `run`, never the daemon: {into_daemon:?}"
    );
    // The checks find what they look for.
    assert!(names_crate("use kube::Api;", "kube"));
    assert!(names_crate("let c: kube::Client;", "kube"));
    assert!(!names_crate("the kubelet; k8s_openapi::api", "kube"));
    let edges = graph_of(&[
        ("operator/mod.rs", "use crate::daemon::Schedule;"),
        ("daemon.rs", "pub struct Schedule;"),
    ]);
    assert_eq!(targets(&edges, "operator"), vec!["daemon".to_string()]);
}

/// The constructors of kube's client types, by type: what makes a client (or the configuration
/// or kubeconfig a client is made of). `ClientBuilder` builds one whatever is called on it.
const KUBE_CONSTRUCTORS: &[(&str, &[&str])] = &[
    ("Client", &["new", "try_from", "try_default"]),
    (
        "Config",
        &[
            "new",
            "infer",
            "incluster",
            "incluster_env",
            "incluster_dns",
            "from_kubeconfig",
            "from_custom_kubeconfig",
            "from_cluster_env",
        ],
    ),
    (
        "Kubeconfig",
        &["read", "read_from", "from_env", "from_yaml"],
    ),
];

/// Where `code` (comments, literals and test items blanked) builds a kube client or reads a
/// kubeconfig itself: each path written in it that, once the names its `use`s bring in are
/// expanded, starts at the `kube` crate and calls a constructor of [`KUBE_CONSTRUCTORS`] or
/// names `ClientBuilder`. `(line, the path as written)`.
fn kube_clients_built(code: &str) -> Vec<(usize, String)> {
    let (written, aliases) = written_paths(code);
    let mut found = Vec::new();
    for path in written {
        let mut segments = path.segments.clone();
        for _ in 0..8 {
            match aliases.get(&segments[0]) {
                Some(target) if target.first() != Some(&segments[0]) => {
                    segments = target.iter().chain(&segments[1..]).cloned().collect();
                }
                _ => break,
            }
        }
        if segments.first().map(String::as_str) != Some("kube") {
            continue;
        }
        let builds = segments.iter().any(|s| s == "ClientBuilder")
            || segments.windows(2).any(|pair| {
                KUBE_CONSTRUCTORS
                    .iter()
                    .any(|(ty, made_by)| pair[0] == *ty && made_by.contains(&pair[1].as_str()))
            });
        if builds {
            found.push((path.line, path.segments.join("::")));
        }
    }
    found
}

#[test]
fn only_the_cluster_room_builds_a_kube_client() {
    let found: Vec<String> = production_code()
        .iter()
        .filter(|(file, _)| !file.starts_with("src/cluster/"))
        .flat_map(|(file, code)| {
            kube_clients_built(code)
                .into_iter()
                .map(move |(line, path)| format!("{file}:{line} {path}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "only src/cluster/ builds kube clients and reads kubeconfigs, with the timeouts, \
         deadline and answer cap every request needs: use Cluster::connect_to for reads, \
         HomeCluster for the clients of the cluster tagpin runs in, or add what is missing \
         there. These build their own:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_kube_client_check_finds_every_spelling() {
    let code = "use kube::Client;\n\
                use kube::config::{self, Kubeconfig as Kc};\n\
                fn a(c: kube::Config) { let _ = Client::try_from(c); }\n\
                async fn b() { kube::Config::infer().await; }\n\
                fn c(p: &Path) { Kc::read_from(p); config::Kubeconfig::from_yaml(\"\"); }\n\
                fn d(c: kube::Config) { kube::client::ClientBuilder::try_from(c); }\n";
    let lines: Vec<usize> = kube_clients_built(code).iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, vec![3, 4, 5, 5, 6]);
    let innocent = "use crate::registry::Client;\n\
                    fn a(s: Settings) { Client::new(s); crate::registry::Client::new(s); }\n\
                    fn b() -> reqwest::ClientBuilder { reqwest::Client::builder() }\n\
                    fn c(k: kube::Client, c: &kube::Config) { Api::<Pod>::all(k); }\n\
                    fn d() { crate::config::Config::new(); }\n";
    assert_eq!(kube_clients_built(innocent), vec![]);
}
