//! The docs stay true (issue #37): in README.md, examples/README.md and every page under docs/,
//! each relative link leads to a file of the repository (and an `#anchor` to a heading of that
//! page, as GitHub makes its anchors), and each `tagpin <command> … --flag` written in code (a
//! code block or an inline code span) names a flag that the real binary's
//! `tagpin <command> --help` lists.
//!
//! A reader copies commands from the docs and follows their links; a flag renamed in the code
//! or a page moved breaks them silently, so this test names each broken one by file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, examples/README.md and every Markdown file under docs/, relative to the
/// repository root.
fn doc_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.expect("list docs/").path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let root = root();
    let mut files = vec![
        PathBuf::from("README.md"),
        PathBuf::from("examples/README.md"),
    ];
    walk(&root.join("docs"), &root, &mut files);
    files.sort();
    files
}

/// A Markdown text as the checks read it: `prose` is the text with fenced code blocks blanked
/// (line breaks kept, so offsets still give line numbers), `code_lines` the lines inside fenced
/// code blocks, by line number.
struct Markdown {
    prose: String,
    code_lines: Vec<(usize, String)>,
}

fn split_code_blocks(text: &str) -> Markdown {
    let mut prose = String::with_capacity(text.len());
    let mut code_lines = Vec::new();
    // The fence that opened the block we are in: its character and length.
    let mut fence: Option<(char, usize)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |m| trimmed.chars().take_while(|c| *c == m).count());
        match (fence, marker) {
            (None, Some(m)) if run >= 3 => {
                fence = Some((m, run));
                prose.push('\n');
            }
            (Some((m, n)), Some(c)) if c == m && run >= n && trimmed[run..].trim().is_empty() => {
                fence = None;
                prose.push('\n');
            }
            (Some(_), _) => {
                code_lines.push((index + 1, line.to_string()));
                prose.push('\n');
            }
            (None, _) => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    Markdown { prose, code_lines }
}

/// The inline code spans of `prose`: `(offset of the span's text, its text)`. A span opens with
/// a run of backticks and closes with a run of the same length; it never crosses a blank line.
fn code_spans(prose: &str) -> Vec<(usize, String)> {
    let bytes = prose.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let start = i + run;
        let mut j = start;
        let mut closed = None;
        while j < bytes.len() {
            if bytes[j] == b'\n' && bytes.get(j + 1) == Some(&b'\n') {
                break;
            }
            if bytes[j] == b'`' {
                let closing = bytes[j..].iter().take_while(|b| **b == b'`').count();
                if closing == run {
                    closed = Some(j);
                    break;
                }
                j += closing;
                continue;
            }
            j += 1;
        }
        match closed {
            Some(end) => {
                spans.push((start, prose[start..end].to_string()));
                i = end + run;
            }
            None => i = start,
        }
    }
    spans
}

/// `prose` with the text of its inline code spans blanked, so that a link written as code is
/// not read as a link.
fn without_code_spans(prose: &str) -> String {
    let mut out = prose.as_bytes().to_vec();
    for (start, text) in code_spans(prose) {
        for b in &mut out[start..start + text.len()] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8: only whole spans become spaces")
}

fn line_at(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Every link target in `prose` (code blanked): inline `[text](target)`, images included, and
/// reference definitions `[name]: target`; `(line, target)`.
fn link_targets(prose: &str) -> Vec<(usize, String)> {
    let text = without_code_spans(prose);
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("](") {
        let start = from + at + 2;
        let rest = &text[start..];
        let end = rest
            .find(|c: char| c == ')' || c.is_whitespace())
            .unwrap_or(rest.len());
        let target = rest[..end].trim_start_matches('<').trim_end_matches('>');
        if !target.is_empty() {
            found.push((line_at(&text, start), target.to_string()));
        }
        from = start;
    }
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[') {
            if let Some((name, after)) = rest.split_once("]:") {
                if !name.is_empty() && !name.contains(']') {
                    if let Some(target) = after.split_whitespace().next() {
                        found.push((index + 1, target.to_string()));
                    }
                }
            }
        }
    }
    found
}

/// The anchor GitHub gives a heading's text: inline markup dropped, lower case, every character
/// that is not a letter, digit, `-`, `_` or space removed, and spaces made hyphens.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    // Links keep their text: `[text](url)` reads as `text`.
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| {
            after[close + 2..]
                .find(')')
                .map(|paren| (close, close + 2 + paren))
        }) {
            Some((close, paren)) => {
                text.push_str(&after[..close]);
                rest = &after[paren + 1..];
            }
            None => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.chars()
        .filter(|c| *c != '`' && *c != '*')
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's ATX headings, as GitHub numbers repeated ones (`x`, `x-1`).
fn anchors(text: &str) -> BTreeSet<String> {
    let markdown = split_code_blocks(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in markdown.prose.lines() {
        let trimmed = line.trim_start();
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&level) || !trimmed[level..].starts_with(' ') {
            continue;
        }
        let title = trimmed[level..].trim().trim_end_matches('#').trim_end();
        let base = slug(title);
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// `path` joined to `dir` with `.` and `..` resolved, or `None` when it climbs out of the root.
fn normalized(dir: &Path, path: &str) -> Option<PathBuf> {
    let joined = if let Some(from_root) = path.strip_prefix('/') {
        PathBuf::from(from_root)
    } else {
        dir.join(path)
    };
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with `target`, a link in the file `file` (relative to `root`), or `None`.
fn broken_link(root: &Path, file: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let linked = if path.is_empty() {
        file.to_path_buf()
    } else {
        match normalized(file.parent().unwrap_or(Path::new("")), path) {
            Some(linked) => linked,
            None => return Some(format!("{path} leads out of the repository")),
        }
    };
    if !root.join(&linked).exists() {
        return Some(format!("no file {}", linked.display()));
    }
    if anchor.is_empty() {
        return None;
    }
    if linked.extension().is_none_or(|e| e != "md") {
        return Some(format!(
            "#{anchor} in {}, which is not a Markdown page",
            linked.display()
        ));
    }
    let text = std::fs::read_to_string(root.join(&linked)).expect("read a linked page");
    (!anchors(&text).contains(anchor))
        .then(|| format!("no heading #{anchor} in {}", linked.display()))
}

/// Each `tagpin <command> … --flag` in `text` (one shell line or one inline code span), as
/// `(command, flag)`. The command's words end at a comment, a pipe, `;`, `&&` or `)`; a
/// command is one of `commands`, so `kubectl -n tagpin get pods` names none.
fn flag_mentions(text: &str, commands: &BTreeSet<String>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("tagpin") {
        let start = from + at;
        from = start + "tagpin".len();
        let before = text[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || "_-.".contains(c)) {
            continue;
        }
        let rest = &text[from..];
        if !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let mut words = rest.split_whitespace();
        let Some(command) = words.next().filter(|w| commands.contains(*w)) else {
            continue;
        };
        for word in words {
            if word.starts_with('#') || ["|", ";", "&&", "||", ")"].contains(&word) {
                break;
            }
            let Some(name) = word.strip_prefix("--") else {
                continue;
            };
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
                found.push((command.to_string(), format!("--{name}")));
            }
            if word.ends_with(';') || word.ends_with(')') {
                break;
            }
        }
    }
    found
}

/// The shell lines of a code block's lines, a line ending in `\` joined to the next: `(number
/// of the first line, the joined text)`.
fn shell_lines(code_lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut joined: Vec<(usize, String)> = Vec::new();
    let mut continued = false;
    for (number, line) in code_lines {
        match joined.last_mut() {
            Some((_, text)) if continued => {
                text.push(' ');
                text.push_str(line);
            }
            _ => joined.push((*number, line.clone())),
        }
        continued = line.trim_end().ends_with('\\');
        if continued {
            let (_, text) = joined.last_mut().unwrap();
            let cut = text.trim_end().len() - 1;
            text.truncate(cut);
        }
    }
    joined
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run tagpin --help");
    assert!(
        out.status.success(),
        "tagpin {args:?} --help failed: {out:?}"
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The commands `tagpin --help` lists (`help` aside).
fn commands_of(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags a `--help` text defines: on each option line, the flags before its
/// description, and the aliases clap shows (`[alias: --mr]`, `[aliases: …]`).
fn flags_of(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let mut take = |text: &str| {
        for word in text.split(|c: char| c.is_whitespace() || c == ',' || c == ']') {
            let name: String = word
                .strip_prefix("--")
                .unwrap_or("")
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !name.is_empty() {
                flags.insert(format!("--{name}"));
            }
        }
    };
    for line in help.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('-') {
            take(trimmed.split("  ").next().unwrap_or(""));
        }
        for marker in ["[alias: ", "[aliases: "] {
            if let Some(at) = trimmed.find(marker) {
                let rest = &trimmed[at + marker.len()..];
                take(&rest[..rest.find(']').unwrap_or(rest.len())]);
            }
        }
    }
    flags
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = root();
    let mut broken = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(root.join(&file)).expect("read a docs page");
        for (line, target) in link_targets(&split_code_blocks(&text).prose) {
            if let Some(why) = broken_link(&root, &file, &target) {
                broken.push(format!("{}:{line}: link ({target}): {why}", file.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links in the docs:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_flag_the_docs_give_a_command_is_in_its_help() {
    let root = root();
    let commands = commands_of(&help(&[]));
    assert!(
        commands.contains("sync") && commands.contains("verify"),
        "tagpin --help lists no commands: {commands:?}"
    );
    let flags: BTreeMap<&String, BTreeSet<String>> = commands
        .iter()
        .map(|command| (command, flags_of(&help(&[command]))))
        .collect();
    let mut unknown = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(root.join(&file)).expect("read a docs page");
        let markdown = split_code_blocks(&text);
        let mut mentions = shell_lines(&markdown.code_lines);
        mentions.extend(
            code_spans(&markdown.prose)
                .into_iter()
                .map(|(offset, span)| (line_at(&markdown.prose, offset), span)),
        );
        for (line, text) in mentions {
            for (command, flag) in flag_mentions(&text, &commands) {
                checked += 1;
                if !flags[&command].contains(&flag) {
                    unknown.push(format!(
                        "{}:{line}: {flag} is not in `tagpin {command} --help` ({})",
                        file.display(),
                        text.trim()
                    ));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "the docs name flags tagpin does not have:\n{}",
        unknown.join("\n")
    );
    assert!(
        checked > 40,
        "only {checked} flags found in the docs: the reader of commands is broken"
    );
}

#[test]
fn the_docs_checks_find_what_they_look_for() {
    assert_eq!(
        slug("`tagpin promote`: carry what converged in staging to production"),
        "tagpin-promote-carry-what-converged-in-staging-to-production"
    );
    assert_eq!(
        slug("Revert a pin the cluster rejected: `verify.on_failure: revert`"),
        "revert-a-pin-the-cluster-rejected-verifyon_failure-revert"
    );
    assert_eq!(
        slug("A shared operator (tenancy), see [here](x.md)"),
        "a-shared-operator-tenancy-see-here"
    );
    let page = "# Title\n\n## Holds\n\n```\n## not a heading\n```\n\n## Holds\n";
    assert_eq!(
        anchors(page).into_iter().collect::<Vec<_>>(),
        ["holds", "holds-1", "title"]
    );

    let markdown = split_code_blocks(
        "See [a](a.md#x) and `[b](b.md)`.\n\n```sh\ntagpin sync --config f \\\n  --dry-run  # --nope\n```\n[c]: ../c.md\n",
    );
    assert_eq!(
        link_targets(&markdown.prose),
        [(1, "a.md#x".to_string()), (7, "../c.md".to_string())]
    );
    let commands: BTreeSet<String> = ["sync", "verify"].map(String::from).into();
    let lines = shell_lines(&markdown.code_lines);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].0, 4);
    assert_eq!(
        flag_mentions(&lines[0].1, &commands),
        [("sync", "--config"), ("sync", "--dry-run")].map(|(c, f)| (c.into(), f.into()))
    );
    assert!(flag_mentions("kubectl -n tagpin get pods --all", &commands).is_empty());
    assert!(flag_mentions("target/release/tagpin-x sync --x", &commands).is_empty());
    assert_eq!(
        flag_mentions("tagpin verify --pr=3 | grep --x", &commands),
        [("verify".into(), "--pr".into())]
    );
    assert_eq!(
        code_spans("a `tagpin verify --pr N` b ``x ` y`` c `open\n\nnever`"),
        [(3, "tagpin verify --pr N".into()), (29, "x ` y".into())]
    );

    let help = "Options:\n  -c, --config <FILE>\n          The file\n      --pr <N>  On GitLab, --mr N says the same [alias: --mr]\n";
    assert_eq!(
        flags_of(help).into_iter().collect::<Vec<_>>(),
        ["--config", "--mr", "--pr"]
    );

    let root = root();
    let readme = Path::new("README.md");
    assert_eq!(broken_link(&root, readme, "Cargo.toml"), None);
    assert_eq!(broken_link(&root, readme, "https://example.com/x"), None);
    assert!(broken_link(&root, readme, "nowhere.md").is_some_and(|why| why == "no file nowhere.md"));
    assert!(broken_link(&root, readme, "../outside.md")
        .is_some_and(|why| why.contains("out of the repository")));
    assert!(broken_link(&root, readme, "#no-such-heading-here")
        .is_some_and(|why| why == "no heading #no-such-heading-here in README.md"));
}
