//! The plan: what pinning would change, computed without I/O.
//!
//! Input is what the scanner found in each file (image fields with byte spans) and what the
//! registry answered for each distinct `repo:tag`. Output is, per file, the new bytes and a
//! unified diff, plus one [`Change`] per field that moves and a [`Problem`] per field that could
//! not be planned. Git, the forge and `pin` only consume a plan; none of them decides anything,
//! which keeps every decision here testable with plain data.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::manifest::{self, Edit, HelmImage, HelmWrite, ImageField, Origin, Target};
use crate::policy::Follow;
use crate::reference::{Digest, Reference};
use crate::resolution::{ResolveKey, ResolveResult};
use crate::workload::Owner;

/// One scanned file, as the planner needs it.
#[derive(Debug, Clone)]
pub struct ScannedFile {
    /// The path as the user gave it (printed in diffs and messages).
    pub path: PathBuf,
    pub source: Vec<u8>,
    pub fields: Vec<ImageField>,
}

/// What happens to one image field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A tag without a digest gets one.
    Pin,
    /// The tag has moved since it was pinned.
    Update,
}

/// One image field that moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub file: PathBuf,
    pub line: usize,
    /// `Deployment/web` (with `namespace/` in front when the manifest or its kustomization
    /// names one), `kustomization` for an `images:` entry, or `helm:<source>` for an image in
    /// Helm values (`helm:values`, `helm:HelmRelease/flux-system/podinfo`).
    pub workload: Owner,
    /// The container name; for a kustomization entry, the image name it matches; for a Helm
    /// image, its key path in the values (`controller.image.tag`).
    pub container: String,
    /// The image asked of the registry, normalized: `docker.io/library/nginx:1.27`.
    pub image: String,
    /// The field's value before and after, as written in the file.
    pub old_value: String,
    pub new_value: String,
    pub old_digest: Option<Digest>,
    pub new_digest: Digest,
    /// The tag before and after, when an `images.policies` entry moved it (`1.4.2` → `1.4.3`);
    /// absent when the tag stays, so output without policies is what it always was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_tag: Option<String>,
    pub action: Action,
    /// The signature that allowed the new digest, for an image an `images.signatures` entry
    /// matches (`{verified: true, by: "key keys/release.pub"}`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<crate::signature::SignatureNote>,
    /// The build provenance that allowed the new digest, for an image an `images.provenance`
    /// entry matches (`{verified: true, builder: "…", source: "https://github.com/acme/web@refs/tags/v1"}`);
    /// absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provenance: Option<crate::provenance::ProvenanceNote>,
    /// How old the new digest is, for an image an `images.minimum_age` entry matches
    /// (`{seconds: 7200, eligible_at: "…", from: "created"}`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age: Option<crate::age::AgeNote>,
}

/// A field held where it is (by a comment, or a revert's hold on the digest): it would move,
/// and is left as it is, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Held {
    pub file: PathBuf,
    pub line: usize,
    pub workload: Owner,
    pub container: String,
    /// The image as the registry is asked for it (`docker.io/library/nginx:1.27`).
    pub image: String,
    /// What the field holds, and the digest it would have moved to.
    pub value: String,
    pub would_be: Digest,
    /// Why: the comment that holds it (`# tagpin: hold …`), the revert that moved a field
    /// away from this digest, or its age (younger than its `images.minimum_age`, and when it
    /// will be old enough).
    pub reason: String,
    /// The commit that holds it (a revert's), when it is not a comment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// How old the digest it would move to is, when it is held for being younger than its
    /// `images.minimum_age` (`{seconds, eligible_at, from}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age: Option<crate::age::AgeNote>,
}

impl Held {
    fn of(change: Change, reason: String, commit: Option<String>) -> Held {
        let age = change.age.clone();
        Held {
            file: change.file,
            line: change.line,
            workload: change.workload,
            container: change.container,
            image: change.image,
            value: change.old_value,
            would_be: change.new_digest,
            reason,
            commit,
            age,
        }
    }
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} {} ({}): held at {}, not moved to {}: {}",
            self.file.display(),
            self.line,
            self.workload,
            self.container,
            self.value,
            self.would_be,
            self.reason
        )
    }
}

/// What every hold comment starts with, however it is spaced (`tagpin: hold`, `tagpin:hold`).
const HOLD_PREFIX: &str = "tagpin:";

/// The hold comment of the field whose value starts at `line` and `column` (1-based, column in
/// characters) of `source`, if its line carries one: the line's YAML comment, the first `#`
/// after the value that is outside quotes and at the line's start or after a blank, reading
/// `tagpin: hold` (`# tagpin: hold until CVE-2026-1234 is fixed`), or holding such a
/// `#`-started part after other words (`# pinned for the audit # tagpin: hold`). A `#` inside
/// a quoted scalar is text, not a comment: a JSON string that says `# tagpin: hold` holds
/// nothing. Returns the hold's words.
pub fn hold_comment(source: &[u8], line: usize, column: usize) -> Option<String> {
    let text = source.split(|b| *b == b'\n').nth(line.checked_sub(1)?)?;
    let text = std::str::from_utf8(text).ok()?;
    let value = text.char_indices().nth(column.checked_sub(1)?)?.0;
    let comment = &text[comment_start(text, value)? + 1..];
    comment.split('#').find_map(|part| {
        let part = part.trim().trim_end_matches('\r');
        let rest = part.strip_prefix(HOLD_PREFIX)?.trim_start();
        rest.starts_with("hold").then(|| format!("# {part}"))
    })
}

/// The byte offset of the `#` that begins `text`'s YAML comment, reading from `from` (where a
/// value begins): outside single- and double-quoted scalars (a quote opens one only where a
/// token begins), and at the line's start or after a blank.
fn comment_start(text: &str, from: usize) -> Option<usize> {
    let mut previous = text[..from].chars().last().unwrap_or(' ');
    let mut quote: Option<char> = None;
    let mut chars = text[from..].char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match quote {
            Some('"') if c == '\\' => {
                chars.next();
            }
            Some('\'') if c == '\'' && chars.peek().is_some_and(|(_, n)| *n == '\'') => {
                chars.next();
            }
            Some(open) if c == open => quote = None,
            Some(_) => {}
            None if c == '#' && previous.is_whitespace() => return Some(from + at),
            None if matches!(c, '"' | '\'')
                && (previous.is_whitespace() || matches!(previous, '[' | '{' | ',' | ':')) =>
            {
                quote = Some(c)
            }
            None => {}
        }
        previous = c;
    }
    None
}

/// A field that could not be planned; the rest of the pass goes on without it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Problem {
    #[error("{}:{line}:{column}: {message}", file.display())]
    InvalidReference {
        file: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}:{line}: {message}", file.display())]
    Unresolved {
        file: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{}: {message}; the file is left as it was", file.display())]
    Rewrite { file: PathBuf, message: String },
}

/// The planned new content of one file.
#[derive(Debug, Clone)]
pub struct FilePlan {
    pub path: PathBuf,
    /// The bytes the plan was computed from; writing checks the file still holds them.
    pub original: Vec<u8>,
    pub updated: Vec<u8>,
    /// Unified diff, `a/<path>` → `b/<path>`.
    pub diff: String,
}

/// Counts for the one-line summary and for JSON output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub files_scanned: usize,
    pub files_changed: usize,
    /// Image fields found (digest-only ones included).
    pub references: usize,
    pub to_pin: usize,
    pub to_update: usize,
    pub current: usize,
    pub digest_only: usize,
    pub failed: usize,
    /// Fields that would move, held where they are by a comment.
    pub held: usize,
}

/// Everything a pass would change, and why not more.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Only files whose bytes change, in path order.
    pub files: Vec<FilePlan>,
    pub changes: Vec<Change>,
    pub problems: Vec<Problem>,
    /// Fields that would move and are held where they are (see [`hold_comment`]).
    pub held: Vec<Held>,
    pub summary: Summary,
}

/// The references the registry must be asked about: every tagged (or implicitly `latest`)
/// reference, digest-only ones excluded, with the tag its policy picks (see [`Follow`]).
/// Invalid ones, and ones whose policy picks nothing, are skipped here and reported by [`plan`].
pub fn references_to_resolve(files: &[ScannedFile], follow: &Follow) -> Vec<Reference> {
    files
        .iter()
        .flat_map(|f| f.fields.iter())
        .filter_map(|field| reference_to_resolve(&field.value, follow))
        .collect()
}

/// The reference the registry must be asked about for one field's value, as
/// [`references_to_resolve`] picks it; `None` when the field needs no answer.
pub fn reference_to_resolve(value: &str, follow: &Follow) -> Option<Reference> {
    let reference = Reference::parse(value).ok()?;
    if reference.is_digest_only() {
        return None;
    }
    follow.target(&reference).ok()
}

/// The digests this pass would pin that need a signature and have no verdict yet, each with
/// the reference to look it up under: every field that moves to a new digest of a matched
/// image (a digest it already holds, or a held one, is not checked).
pub fn signatures_to_check(
    files: &[ScannedFile],
    resolutions: &BTreeMap<ResolveKey, ResolveResult>,
    follow: &Follow,
) -> BTreeMap<crate::signature::Subject, (Reference, Digest)> {
    let gate = &follow.signatures;
    if gate.rules.is_empty() {
        return BTreeMap::new();
    }
    digests_to_check(files, resolutions, follow, |target, subject| {
        gate.rules.for_image(target).is_some() && !gate.checked.contains_key(subject)
    })
}

/// The digests this pass would pin that need build provenance (`images.provenance`) and have
/// no verdict yet, as [`signatures_to_check`] picks them (one refused for its signature is
/// not looked at: it is not pinned whatever its provenance).
pub fn provenance_to_check(
    files: &[ScannedFile],
    resolutions: &BTreeMap<ResolveKey, ResolveResult>,
    follow: &Follow,
) -> BTreeMap<crate::provenance::Subject, (Reference, Digest)> {
    let gate = &follow.provenance;
    if gate.rules.is_empty() {
        return BTreeMap::new();
    }
    digests_to_check(files, resolutions, follow, |target, subject| {
        gate.rules.for_image(target).is_some()
            && !gate.checked.contains_key(subject)
            && !matches!(follow.signatures.checked.get(subject), Some(Err(_)))
    })
}

/// The digests this pass would pin whose age must be known and is not yet, each with the
/// reference to look it up under: every field that moves to a new digest of an image an
/// `images.minimum_age` entry matches (a digest it already holds, a held one, or one this
/// pass refused for its signature or provenance, is not looked at).
pub fn ages_to_check(
    files: &[ScannedFile],
    resolutions: &BTreeMap<ResolveKey, ResolveResult>,
    follow: &Follow,
) -> BTreeMap<crate::age::Subject, (Reference, Digest)> {
    let ages = &follow.ages;
    if ages.rules.is_empty() {
        return BTreeMap::new();
    }
    digests_to_check(files, resolutions, follow, |target, subject| {
        ages.rules.for_image(target).is_some()
            && !ages.born.contains_key(subject)
            && !refused(follow, subject)
    })
}

/// Whether this pass refused `subject` for its signature or its provenance: it is not
/// pinned whatever else is known of it.
fn refused(follow: &Follow, subject: &crate::reference::Subject) -> bool {
    matches!(follow.signatures.checked.get(subject), Some(Err(_)))
        || matches!(follow.provenance.checked.get(subject), Some(Err(_)))
}

/// Every digest this pass would pin (a field moving to a new digest, not held) that a gate
/// asks about, `wanted` saying which: the one walk the gates (signatures, provenance, ages)
/// share.
fn digests_to_check(
    files: &[ScannedFile],
    resolutions: &BTreeMap<ResolveKey, ResolveResult>,
    follow: &Follow,
    wanted: impl Fn(&Reference, &crate::reference::Subject) -> bool,
) -> BTreeMap<crate::reference::Subject, (Reference, Digest)> {
    let mut found = BTreeMap::new();
    for field in files.iter().flat_map(|f| f.fields.iter()) {
        let Some((target, digest)) = moving_to(field, resolutions, follow) else {
            continue;
        };
        let subject = crate::reference::Subject::of(&target, &digest);
        if wanted(&target, &subject) {
            found.insert(subject, (target, digest));
        }
    }
    found
}

/// The reference and new digest a field would move to: `None` for a field that stays (it
/// holds that digest, or a revert holds it) or cannot be planned.
fn moving_to(
    field: &ImageField,
    resolutions: &BTreeMap<ResolveKey, ResolveResult>,
    follow: &Follow,
) -> Option<(Reference, Digest)> {
    let current = Reference::parse(&field.value).ok()?;
    if current.is_digest_only() {
        return None;
    }
    let target = follow.target(&current).ok()?;
    let Some(Ok(resolved)) = resolutions.get(&ResolveKey::of(&target)) else {
        return None;
    };
    let digest = &resolved.digest;
    if current.digest() == Some(digest) || follow.held(&target, digest).is_some() {
        return None;
    }
    Some((target, digest.clone()))
}

/// The digests fields already pin of images an `images.signatures` entry matches, each with
/// the reference to look it up under (the field's own tag, or its name for a digest-only
/// one): what `pin --check` checks, since a pin written before the entry existed, or by hand,
/// was never checked.
pub fn pins_to_check(
    files: &[ScannedFile],
    follow: &Follow,
) -> BTreeMap<crate::signature::Subject, (Reference, Digest)> {
    pins_matching(files, |reference| {
        follow.signatures.rules.for_image(reference).is_some()
    })
}

/// The digests fields already pin of images an `images.provenance` entry matches: what
/// `pin --check` checks for build provenance, as [`pins_to_check`] for signatures.
pub fn provenance_pins_to_check(
    files: &[ScannedFile],
    follow: &Follow,
) -> BTreeMap<crate::provenance::Subject, (Reference, Digest)> {
    pins_matching(files, |reference| {
        follow.provenance.rules.for_image(reference).is_some()
    })
}

fn pins_matching(
    files: &[ScannedFile],
    matched: impl Fn(&Reference) -> bool,
) -> BTreeMap<crate::reference::Subject, (Reference, Digest)> {
    let mut wanted = BTreeMap::new();
    for field in files.iter().flat_map(|f| f.fields.iter()) {
        let (Ok(reference), Some(digest)) = (Reference::parse(&field.value), field.pinned_digest())
        else {
            continue;
        };
        if matched(&reference) {
            let subject = crate::reference::Subject::of(&reference, &digest);
            wanted.insert(subject, (reference, digest));
        }
    }
    wanted
}

/// A problem for every field pinning a digest [`pins_to_check`] or
/// [`provenance_pins_to_check`] found and the checks refused: `file:line: image@digest:
/// pinned but not signed: why` (or `pinned without accepted provenance: why`).
pub fn unsigned_pins(files: &[ScannedFile], follow: &Follow) -> Vec<Problem> {
    let mut problems = Vec::new();
    for file in files {
        for field in &file.fields {
            let (Ok(reference), Some(digest)) =
                (Reference::parse(&field.value), field.pinned_digest())
            else {
                continue;
            };
            let subject = crate::reference::Subject::of(&reference, &digest);
            let why = match (
                follow.signatures.checked.get(&subject),
                follow.provenance.checked.get(&subject),
            ) {
                (Some(Err(refusal)), _) => format!("pinned but not signed: {refusal}"),
                (_, Some(Err(refusal))) => {
                    format!("pinned without accepted provenance: {refusal}")
                }
                _ => continue,
            };
            problems.push(Problem::Unresolved {
                file: file.path.clone(),
                line: field.line,
                message: format!("{}@{digest}: {why}", reference.canonical_name()),
            });
        }
    }
    problems
}

/// What one image field should become, as the caller of [`plan_by`] decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// The field moves to `reference` (its tag is the one wanted) at `digest`; a field already
    /// there is current.
    To {
        reference: Reference,
        digest: Digest,
    },
    /// A digest-only reference, which has no tag to pin.
    DigestOnly,
    /// Left as it is on purpose; the caller says why (counted as current).
    Leave,
    /// Cannot be planned; becomes [`Problem::Unresolved`].
    Failed(String),
    /// Would move to `reference` at `digest`, which is held (a revert moved a field away from
    /// it, the revert's `commit`; or it is younger than its minimum age, `age`): left as it is,
    /// reported as [`Held`] with `reason`.
    Held {
        reference: Reference,
        digest: Digest,
        reason: String,
        commit: Option<String>,
        age: Option<crate::age::AgeNote>,
    },
}

/// Computes the plan of a pass: each tag (or the tag its policy picks) at the digest the
/// registry answered. Pure: the same inputs always give the same plan. `follow` holds the
/// tag policies and tag lists; [`Follow::default`] keeps every tag.
pub fn plan(
    files: &[ScannedFile],
    resolutions: &BTreeMap<ResolveKey, ResolveResult>,
    follow: &Follow,
) -> Plan {
    let mut plan = plan_by(files, |reference| {
        if reference.is_digest_only() {
            return Wanted::DigestOnly;
        }
        let wanted = match follow.target(reference) {
            Ok(wanted) => wanted,
            Err(e) => return Wanted::Failed(e.to_string()),
        };
        let key = ResolveKey::of(&wanted);
        match resolutions.get(&key) {
            Some(Ok(resolved)) => match follow.held(&wanted, &resolved.digest) {
                Some(hold) => Wanted::Held {
                    reason: hold.reason.clone(),
                    commit: Some(hold.commit.clone()),
                    age: None,
                    reference: wanted,
                    digest: resolved.digest.clone(),
                },
                None => match gate_refusal(follow, reference, &wanted, &resolved.digest) {
                    Some(refusal) => {
                        Wanted::Failed(format!("{key}@{}: not pinned: {refusal}", resolved.digest))
                    }
                    None => old_enough(&follow.ages, reference, wanted, resolved.digest.clone()),
                },
            },
            Some(Err(e)) => Wanted::Failed(e.to_string()),
            None => Wanted::Failed(format!("{key}: not resolved")),
        }
    });
    if !follow.signatures.rules.is_empty() {
        for change in &mut plan.changes {
            change.signature = signature_of(change, follow);
        }
    }
    note_provenance(&mut plan.changes, &follow.provenance);
    note_ages(&mut plan.changes, &follow.ages);
    plan
}

/// Why a field written `current` may not move to `digest` of `wanted`: the first gate that
/// refuses it (its signature, then its build provenance); `None` when they let it.
pub fn gate_refusal(
    follow: &Follow,
    current: &Reference,
    wanted: &Reference,
    digest: &Digest,
) -> Option<String> {
    if let Some(Err(refusal)) = follow.signatures.decide(current, wanted, digest) {
        return Some(refusal.to_string());
    }
    if let Some(Err(refusal)) = follow.provenance.decide(current, wanted, digest) {
        return Some(refusal.to_string());
    }
    None
}

/// Notes on each change the build provenance that let it move, where an `images.provenance`
/// entry matches its image (see [`Change::provenance`]).
pub fn note_provenance(changes: &mut [Change], provenance: &crate::provenance::Verdicts) {
    if provenance.rules.is_empty() {
        return;
    }
    for change in changes {
        change.provenance = Reference::parse(&change.image)
            .ok()
            .and_then(|image| provenance.note(&image, &change.new_digest));
    }
}

/// Notes on each change how old its new digest is, where an `images.minimum_age` entry
/// matches its image (see [`Change::age`]).
pub fn note_ages(changes: &mut [Change], ages: &crate::age::Ages) {
    if ages.rules.is_empty() {
        return;
    }
    for change in changes {
        change.age = Reference::parse(&change.image)
            .ok()
            .and_then(|image| ages.note(&image, &change.new_digest));
    }
}

/// A field written `current` moves to `digest` of `wanted`, unless the digest is younger than
/// its `images.minimum_age`: then it is held where it is, saying when it will be old enough.
pub fn old_enough(
    ages: &crate::age::Ages,
    current: &Reference,
    wanted: Reference,
    digest: Digest,
) -> Wanted {
    match ages.decide(current, &wanted, &digest) {
        Some(decision) if !decision.eligible() => Wanted::Held {
            reason: decision.reason(),
            commit: None,
            age: Some(decision.note()),
            reference: wanted,
            digest,
        },
        _ => Wanted::To {
            reference: wanted,
            digest,
        },
    }
}

/// The signature that let `change` move, as reports show it (see [`Change::signature`]).
fn signature_of(change: &Change, follow: &Follow) -> Option<crate::signature::SignatureNote> {
    let wanted = Reference::parse(&change.image).ok()?;
    let subject = crate::signature::Subject::of(&wanted, &change.new_digest);
    match follow.signatures.checked.get(&subject)? {
        Ok(signer) => Some(crate::signature::SignatureNote {
            verified: true,
            by: signer.to_string(),
        }),
        Err(_) => None,
    }
}

/// Plans a pass file by file as the registry's answers arrive, instead of all at once after
/// the last one: each file is planned (rewritten and diffed) as soon as every image it names
/// is answered, so only the files waiting on the last answers are left for the end. The
/// result is exactly [`plan`] over the same files and answers, whatever order they came in.
pub struct Planner<'a> {
    files: &'a [ScannedFile],
    follow: &'a Follow,
    resolutions: BTreeMap<ResolveKey, ResolveResult>,
    /// The files, by index, still waiting on each unanswered key.
    waiting: BTreeMap<ResolveKey, Vec<usize>>,
    /// How many distinct keys each file still waits on.
    missing: Vec<usize>,
    /// Each file's plan, once planned.
    planned: Vec<Option<Plan>>,
}

impl<'a> Planner<'a> {
    /// Files that need no answer (only digest-only or invalid references) are planned here.
    pub fn new(files: &'a [ScannedFile], follow: &'a Follow) -> Planner<'a> {
        let mut planner = Planner {
            files,
            follow,
            resolutions: BTreeMap::new(),
            waiting: BTreeMap::new(),
            missing: vec![0; files.len()],
            planned: vec![None; files.len()],
        };
        // Most images are named in several files: each value is parsed once.
        let mut key_of_value: HashMap<&str, Option<ResolveKey>> = HashMap::new();
        for (index, file) in files.iter().enumerate() {
            let mut keys: Vec<ResolveKey> = file
                .fields
                .iter()
                .filter_map(|field| {
                    key_of_value
                        .entry(field.value.as_str())
                        .or_insert_with(|| key_to_resolve(&field.value, follow))
                        .clone()
                })
                .collect();
            keys.sort();
            keys.dedup();
            planner.missing[index] = keys.len();
            for key in keys {
                planner.waiting.entry(key).or_default().push(index);
            }
            if planner.missing[index] == 0 {
                planner.plan_file(index);
            }
        }
        planner
    }

    /// Takes one answer and plans every file it was the last one missing for.
    pub fn answer(&mut self, key: ResolveKey, result: ResolveResult) {
        let ready = self.waiting.remove(&key).unwrap_or_default();
        self.resolutions.insert(key, result);
        for index in ready {
            self.missing[index] -= 1;
            if self.missing[index] == 0 {
                self.plan_file(index);
            }
        }
    }

    /// The whole plan, in file order. A file still waiting (an answer that never came) is
    /// planned with what is known, so its missing images are reported as not resolved.
    pub fn finish(mut self) -> Plan {
        let mut whole = Plan::default();
        // Sized once: grown by doubling, the changes of 2,000 files were copied twice over.
        let planned = self.planned.iter().flatten();
        let (files, changes) = planned.fold((0, 0), |(files, changes), part| {
            (files + part.files.len(), changes + part.changes.len())
        });
        whole.files.reserve(files);
        whole.changes.reserve(changes);
        for index in 0..self.files.len() {
            let part = match self.planned[index].take() {
                Some(part) => part,
                None => plan(
                    std::slice::from_ref(&self.files[index]),
                    &self.resolutions,
                    self.follow,
                ),
            };
            whole.absorb(part);
        }
        whole
    }

    fn plan_file(&mut self, index: usize) {
        let file = std::slice::from_ref(&self.files[index]);
        self.planned[index] = Some(plan(file, &self.resolutions, self.follow));
    }
}

/// The key the registry is asked under for one field's value, as [`references_to_resolve`]
/// picks it; `None` when the field needs no answer.
fn key_to_resolve(value: &str, follow: &Follow) -> Option<ResolveKey> {
    reference_to_resolve(value, follow).map(|r| ResolveKey::of(&r))
}

impl Plan {
    /// Appends the plan of later files.
    fn absorb(&mut self, other: Plan) {
        self.files.extend(other.files);
        self.changes.extend(other.changes);
        self.problems.extend(other.problems);
        self.held.extend(other.held);
        let (total, part) = (&mut self.summary, other.summary);
        total.files_scanned += part.files_scanned;
        total.files_changed += part.files_changed;
        total.references += part.references;
        total.to_pin += part.to_pin;
        total.to_update += part.to_update;
        total.current += part.current;
        total.digest_only += part.digest_only;
        total.failed += part.failed;
        total.held += part.held;
    }
}

/// Computes a plan where `want` decides, for each parsed reference, where it should point:
/// the edits, byte-exact rewrites, diffs and counts are the same whoever decides (the
/// registry for `sync`, a converged stage for `promote`). Pure.
pub fn plan_by(files: &[ScannedFile], want: impl Fn(&Reference) -> Wanted) -> Plan {
    let mut plan = Plan::default();
    plan.summary.files_scanned = files.len();
    for file in files {
        let mut edits = Vec::new();
        let mut changes = Vec::new();
        // Most files hold no hold comment: their lines are not searched for one, field by field.
        // (A SIMD substring search: comparing every window was about 3 % of a `plan`.)
        let may_hold = memchr::memmem::find(&file.source, HOLD_PREFIX.as_bytes()).is_some();
        for field in &file.fields {
            plan.summary.references += 1;
            match plan_field(&file.path, field, &want) {
                FieldPlan::Change(change, field_edits) => {
                    let held =
                        may_hold.then(|| hold_comment(&file.source, field.line, field.column));
                    match held.flatten() {
                        Some(reason) => {
                            plan.summary.held += 1;
                            plan.held.push(Held::of(*change, reason, None));
                        }
                        None => {
                            edits.extend(field_edits);
                            changes.push(*change);
                        }
                    }
                }
                FieldPlan::Held(held) => {
                    plan.summary.held += 1;
                    plan.held.push(*held);
                }
                FieldPlan::Current => plan.summary.current += 1,
                FieldPlan::DigestOnly => plan.summary.digest_only += 1,
                FieldPlan::Failed(problem) => {
                    plan.summary.failed += 1;
                    plan.problems.push(problem);
                }
            }
        }
        if edits.is_empty() {
            continue;
        }
        let updated = match manifest::apply(&file.source, &edits) {
            Ok(updated) => updated,
            Err(e) => {
                plan.summary.failed += changes.len();
                plan.problems.push(Problem::Rewrite {
                    file: file.path.clone(),
                    message: e.to_string(),
                });
                continue;
            }
        };
        if updated == file.source {
            continue;
        }
        for change in &changes {
            match change.action {
                Action::Pin => plan.summary.to_pin += 1,
                Action::Update => plan.summary.to_update += 1,
            }
        }
        plan.summary.files_changed += 1;
        plan.files.push(FilePlan {
            path: file.path.clone(),
            diff: unified_diff(&file.path, &file.source, &updated),
            original: file.source.clone(),
            updated,
        });
        plan.changes.extend(changes);
    }
    plan
}

enum FieldPlan {
    /// The change, and the edits that make it: the field itself, and a kustomize entry's
    /// `newTag` when a policy moves the tag.
    Change(Box<Change>, Vec<Edit>),
    Current,
    DigestOnly,
    Failed(Problem),
    /// A change the caller holds (see [`Wanted::Held`]).
    Held(Box<Held>),
}

fn plan_field(path: &Path, field: &ImageField, want: &impl Fn(&Reference) -> Wanted) -> FieldPlan {
    let reference = match Reference::parse(&field.value) {
        Ok(r) => r,
        Err(e) => {
            return FieldPlan::Failed(Problem::InvalidReference {
                file: path.to_path_buf(),
                line: field.line,
                column: field.column,
                message: e.to_string(),
            })
        }
    };
    let (wanted, digest, held) = match want(&reference) {
        Wanted::To { reference, digest } => (reference, digest, None),
        Wanted::Held {
            reference,
            digest,
            reason,
            commit,
            age,
        } => (reference, digest, Some((reason, commit, age))),
        Wanted::DigestOnly => return FieldPlan::DigestOnly,
        Wanted::Leave => return FieldPlan::Current,
        Wanted::Failed(message) => {
            return FieldPlan::Failed(Problem::Unresolved {
                file: path.to_path_buf(),
                line: field.line,
                message,
            })
        }
    };
    let key = ResolveKey::of(&wanted);
    let (old_tag, new_tag) = (reference.effective_tag(), wanted.effective_tag());
    let tag_moves = old_tag != new_tag;
    let (workload, container, old_digest, new_value) =
        field_parts(field, &reference, &wanted, &digest);
    if old_digest.as_ref() == Some(&digest) && !tag_moves {
        return FieldPlan::Current;
    }
    let action = if old_digest.is_some() {
        Action::Update
    } else {
        Action::Pin
    };
    let old_value = match &field.origin {
        Origin::Container { .. } => field.value.clone(),
        Origin::KustomizeImage { current_digest, .. } => current_digest.clone().unwrap_or_default(),
        Origin::HelmImage(image) => helm_old_value(image, &reference),
    };
    let mut edits = vec![Edit {
        target: field.target.clone(),
        new_value: new_value.clone(),
    }];
    let tag_at = match &field.origin {
        Origin::Container { .. } => None,
        Origin::KustomizeImage { tag, .. } => tag.as_ref(),
        Origin::HelmImage(image) => image.tag_target.as_ref(),
    };
    if let (true, Some(at), Some(tag)) = (tag_moves, tag_at, new_tag) {
        edits.push(Edit {
            target: Target::clone(at),
            new_value: tag.to_string(),
        });
    }
    let moved = |tag: Option<&str>| tag.filter(|_| tag_moves).map(str::to_string);
    let change = Change {
        file: path.to_path_buf(),
        line: field.line,
        workload,
        container,
        image: key.to_string(),
        old_value,
        new_value,
        old_digest,
        new_digest: digest,
        old_tag: moved(old_tag),
        new_tag: moved(new_tag),
        action,
        signature: None,
        provenance: None,
        age: None,
    };
    match held {
        Some((reason, commit, age)) => {
            let change = Change { age, ..change };
            FieldPlan::Held(Box::new(Held::of(change, reason, commit)))
        }
        None => FieldPlan::Change(Box::new(change), edits),
    }
}

/// Whose field it is (the workload, kustomization or chart values), its name there (the
/// container, image name or values key), the digest it pins now, and the value that pins
/// `wanted` at `digest`.
fn field_parts(
    field: &ImageField,
    reference: &Reference,
    wanted: &Reference,
    digest: &Digest,
) -> (Owner, String, Option<Digest>, String) {
    match &field.origin {
        Origin::Container {
            workload,
            container,
            ..
        } => (
            Owner::Workload(workload.clone()),
            container.clone(),
            reference.digest().cloned(),
            wanted.with_digest(digest),
        ),
        Origin::KustomizeImage {
            name,
            current_digest,
            ..
        } => (
            Owner::Kustomization,
            name.clone(),
            current_digest
                .as_deref()
                .and_then(|d| Digest::parse(d).ok()),
            digest.to_string(),
        ),
        Origin::HelmImage(image) => (
            Owner::Helm(image.source.owner_name()),
            image.key_path.clone(),
            reference.digest().cloned(),
            helm_value(image.write, wanted, digest),
        ),
    }
}

/// What a Helm image's target is given: the whole reference for an `image:` string, the
/// digest for a `digest:` key (written or inserted), its hex for a `sha:` key, and
/// `tag@digest` for a tag that carries the digest.
fn helm_value(write: HelmWrite, wanted: &Reference, digest: &Digest) -> String {
    match write {
        HelmWrite::Reference => wanted.with_digest(digest),
        HelmWrite::DigestKey | HelmWrite::InsertDigest => digest.to_string(),
        HelmWrite::ShaKey => digest.hex().to_string(),
        HelmWrite::TagSuffix => format!("{}@{digest}", wanted.effective_tag().unwrap_or("latest")),
    }
}

/// The text a Helm image's target holds now, in the form [`helm_value`] writes.
fn helm_old_value(image: &HelmImage, reference: &Reference) -> String {
    let digest = image.digest.as_deref();
    match image.write {
        HelmWrite::Reference => reference.to_string(),
        HelmWrite::DigestKey | HelmWrite::InsertDigest => digest.unwrap_or_default().to_string(),
        HelmWrite::ShaKey => digest
            .map(|d| d.strip_prefix("sha256:").unwrap_or(d).to_string())
            .unwrap_or_default(),
        HelmWrite::TagSuffix => {
            let tag = image.tag.as_deref().unwrap_or_default();
            match digest {
                Some(digest) => format!("{tag}@{digest}"),
                None => tag.to_string(),
            }
        }
    }
}

/// A unified diff with three lines of context, as `git diff` shows it.
///
/// The same as `similar::TextDiff::from_lines`, with the lines split here: similar splits
/// them character by character, which was a third of the time of every diff of a pass.
fn unified_diff(path: &Path, old: &[u8], new: &[u8]) -> String {
    let (old, new) = (text_of(old), text_of(new));
    let (old_lines, new_lines) = (lines_of(&old), lines_of(&new));
    let name = path.display().to_string();
    if let Some(diff) = in_place_diff(&name, &old_lines, &new_lines) {
        return diff;
    }
    similar::TextDiff::configure()
        .newline_terminated(true)
        .diff_slices(&old_lines, &new_lines)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{name}"), &format!("b/{name}"))
        .to_string()
}

/// Lines of context around each change, as `git diff` shows them.
const CONTEXT: usize = 3;

/// The unified diff `similar` makes, written directly when the edit is the usual one: the
/// same number of lines, some replaced in place (an image value rewritten), and no replaced
/// line equal to any line on the other side. Then the only shortest edit deletes and inserts
/// exactly the replaced lines, which is what Myers' algorithm finds, and the hunks follow
/// from their positions; the diff costs one comparison per line instead of a diff
/// algorithm (about 6 ms of a 2,000-file pass). `None` otherwise, for `similar` to diff.
fn in_place_diff(name: &str, old: &[&str], new: &[&str]) -> Option<String> {
    if old.len() != new.len() {
        return None;
    }
    let changed: Vec<usize> = (0..old.len()).filter(|&i| old[i] != new[i]).collect();
    // Looked up in a set when a scan per replaced line would cost more than a pass over the
    // lines to hash them (a large file with many images stays linear).
    let paired = if changed.len() > 8 {
        let (old_set, new_set): (HashSet<&str>, HashSet<&str>) =
            (old.iter().copied().collect(), new.iter().copied().collect());
        changed
            .iter()
            .any(|&i| old_set.contains(new[i]) || new_set.contains(old[i]))
    } else {
        changed
            .iter()
            .any(|&i| old.contains(&new[i]) || new.contains(&old[i]))
    };
    if paired {
        return None;
    }
    // Runs of replaced lines, [start, end).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &i in &changed {
        match runs.last_mut() {
            Some(run) if run.1 == i => run.1 += 1,
            _ => runs.push((i, i + 1)),
        }
    }
    // Sized once: grown line by line, the diff was copied a few times over.
    let mut diff = String::with_capacity(diff_capacity(name, old, new, &runs));
    let mut first = 0;
    while first < runs.len() {
        // Runs at most twice the context apart share a hunk, as `similar` groups them.
        let mut last = first;
        while last + 1 < runs.len() && runs[last + 1].0 - runs[last].1 <= 2 * CONTEXT {
            last += 1;
        }
        let start = runs[first].0.saturating_sub(CONTEXT);
        let end = (runs[last].1 + CONTEXT).min(old.len());
        if diff.is_empty() {
            let _ = write!(diff, "--- a/{name}\n+++ b/{name}\n");
        }
        let range = HunkRange(start, end);
        let _ = writeln!(diff, "@@ -{range} +{range} @@");
        let mut at = start;
        for &(from, to) in &runs[first..=last] {
            push_lines(&mut diff, ' ', &old[at..from]);
            push_lines(&mut diff, '-', &old[from..to]);
            push_lines(&mut diff, '+', &new[from..to]);
            at = to;
        }
        push_lines(&mut diff, ' ', &old[at..end]);
        first = last + 1;
    }
    Some(diff)
}

/// About the length of the diff [`in_place_diff`] writes for `runs`: its headers, every
/// line of context and both sides of each replaced line, each with its tag.
fn diff_capacity(name: &str, old: &[&str], new: &[&str], runs: &[(usize, usize)]) -> usize {
    let lines = |lines: &[&str]| lines.iter().map(|line| line.len() + 1).sum::<usize>();
    let mut capacity = 2 * name.len() + 16;
    for &(from, to) in runs {
        let (start, end) = (from.saturating_sub(CONTEXT), (to + CONTEXT).min(old.len()));
        capacity += 48 + lines(&old[start..end]) + lines(&new[from..to]);
    }
    capacity
}

/// A hunk header's range as `similar` (and `diff -u`) writes it: `start,length`, or only
/// the start for one line. (Formatted in place: a `String` per header was two allocations
/// per file of a pass.)
struct HunkRange(usize, usize);

impl std::fmt::Display for HunkRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let HunkRange(start, end) = *self;
        if end - start == 1 {
            write!(f, "{}", start + 1)
        } else {
            write!(f, "{},{}", start + 1, end - start)
        }
    }
}

/// Diff lines with their tag; a last line without a line break gets git's marker.
fn push_lines(diff: &mut String, tag: char, lines: &[&str]) {
    for line in lines {
        diff.push(tag);
        diff.push_str(line);
        if !line.ends_with(['\n', '\r']) {
            diff.push_str("\n\\ No newline at end of file\n");
        }
    }
}

/// The bytes as text: borrowed when they are UTF-8 (a scanned manifest always is), else
/// decoded lossily.
fn text_of(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The lines of `text`, each with its line break, split where `similar` splits them for a
/// line diff: after `\r\n`, after `\n`, and after a `\r` not followed by `\n`. Both are
/// ASCII, never part of a longer UTF-8 sequence, so every cut is on a character boundary.
fn lines_of(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    if memchr::memchr(b'\r', bytes).is_none() {
        // The usual case: only `\n` ends a line, found with SIMD `memchr`. `split_inclusive`
        // searched each short line's break with a slower generic search, and splitting
        // lines for diffs was about 8 % of a 2,000-file `plan`'s instructions.
        let mut lines = Vec::with_capacity(memchr::memchr_iter(b'\n', bytes).count() + 1);
        let mut start = 0;
        for at in memchr::memchr_iter(b'\n', bytes) {
            lines.push(&text[start..=at]);
            start = at + 1;
        }
        if start < bytes.len() {
            lines.push(&text[start..]);
        }
        return lines;
    }
    let mut lines = Vec::new();
    let (mut start, mut at) = (0, 0);
    while at < bytes.len() {
        let end = match bytes[at] {
            b'\r' if bytes.get(at + 1) == Some(&b'\n') => at + 2,
            b'\r' | b'\n' => at + 1,
            _ => {
                at += 1;
                continue;
            }
        };
        lines.push(&text[start..end]);
        (start, at) = (end, end);
    }
    if start < bytes.len() {
        lines.push(&text[start..]);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The diff as `similar` makes it when it splits the lines itself.
    fn similar_unified_diff(path: &Path, old: &str, new: &str) -> String {
        let name = path.display().to_string();
        similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{name}"), &format!("b/{name}"))
            .to_string()
    }

    #[test]
    fn lines_are_split_where_similar_splits_them() {
        use similar::DiffableStr as _;
        for text in [
            "",
            "a",
            "a\n",
            "a\nb",
            "a\r\nb\r\n",
            "a\rb\r",
            "\r\n\n\r\r\n",
            "é\r\n😀\rx\n\n",
            "image: nginx:1.27\n  # ü\n",
        ] {
            assert_eq!(lines_of(text), text.tokenize_lines(), "{text:?}");
        }
    }

    #[test]
    fn an_image_rewritten_in_place_is_diffed_without_the_diff_algorithm() {
        let old = "a: 1\nb: 2\nimage: x:1\nc: 3\n";
        let new = "a: 1\nb: 2\nimage: x:1@sha256:0\nc: 3\n";
        let diff = in_place_diff("p.yaml", &lines_of(old), &lines_of(new));
        assert_eq!(
            diff,
            Some(similar_unified_diff(Path::new("p.yaml"), old, new))
        );
        // A replaced line equal to a line elsewhere leaves the choice to `similar`.
        let new = "a: 1\nb: 2\na: 1\nc: 3\n";
        assert_eq!(
            in_place_diff("p.yaml", &lines_of(old), &lines_of(new)),
            None
        );
    }

    proptest::proptest! {
        #[test]
        fn lines_replaced_in_place_are_diffed_as_similar_diffs_them(
            old in proptest::collection::vec("(a|b|image: x| |)(\n|\r\n)", 0..40),
            last in "(|c|image: y)",
            replaced in proptest::collection::vec((0usize..41, "(a|image: x@d|c|image: y|z)(\n|)"), 0..16),
        ) {
            let mut lines = old;
            lines.push(last);
            let mut new = lines.clone();
            for (at, text) in replaced {
                let at = at.min(new.len() - 1);
                new[at] = text;
            }
            let (old, new) = (lines.concat(), new.concat());
            let path = Path::new("apps/web.yaml");
            proptest::prop_assert_eq!(
                unified_diff(path, old.as_bytes(), new.as_bytes()),
                similar_unified_diff(path, &old, &new)
            );
        }

        #[test]
        fn diffs_are_the_ones_similar_makes(
            old in proptest::collection::vec("(a|b|é|image: x|\\r|\\n|\\r\\n| ){0,6}", 0..40),
            edits in proptest::collection::vec((0usize..40, "(c|\\n|\\r|ü)"), 0..6),
        ) {
            let old: String = old.concat();
            let mut new = old.clone();
            for (at, text) in edits {
                let mut at = at.min(new.len());
                while !new.is_char_boundary(at) {
                    at -= 1;
                }
                new.insert_str(at, &text);
            }
            let path = Path::new("apps/web.yaml");
            proptest::prop_assert_eq!(
                unified_diff(path, old.as_bytes(), new.as_bytes()),
                similar_unified_diff(path, &old, &new)
            );
        }
    }
    use crate::resolution::{ManifestKind, RegistryError, Resolved};

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn scanned(path: &str, text: &str) -> ScannedFile {
        let outcome = manifest::scan(Path::new(path), text.as_bytes()).expect("valid manifest");
        ScannedFile {
            path: PathBuf::from(path),
            source: text.as_bytes().to_vec(),
            fields: outcome.fields,
        }
    }

    fn answers(
        pairs: &[(&str, Result<&str, RegistryError>)],
    ) -> BTreeMap<ResolveKey, ResolveResult> {
        pairs
            .iter()
            .map(|(image, answer)| {
                let key = ResolveKey::of(&Reference::parse(image).unwrap());
                let result = answer.clone().map(|d| Resolved {
                    digest: Digest::parse(d).unwrap(),
                    kind: ManifestKind::Image,
                    media_type: String::new(),
                });
                (key, result)
            })
            .collect()
    }

    fn pod(images: &[&str]) -> String {
        let mut text =
            String::from("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n");
        for (i, image) in images.iter().enumerate() {
            text.push_str(&format!("  - name: c{i}\n    image: {image}\n"));
        }
        text
    }

    #[test]
    fn unpinned_stale_current_and_digest_only_fields_are_told_apart() {
        let text = pod(&[
            "nginx:1.27",
            &format!("redis:7@{D2}"),
            &format!("busybox:1@{D1}"),
            &format!("alpine@{D2}"),
        ]);
        let files = [scanned("pod.yaml", &text)];
        let plan = plan(
            &files,
            &answers(&[
                ("nginx:1.27", Ok(D1)),
                ("redis:7", Ok(D1)),
                ("busybox:1", Ok(D1)),
            ]),
            &Follow::default(),
        );
        assert_eq!(
            (
                plan.summary.to_pin,
                plan.summary.to_update,
                plan.summary.current,
                plan.summary.digest_only
            ),
            (1, 1, 1, 1)
        );
        let updated = String::from_utf8(plan.files[0].updated.clone()).unwrap();
        assert_eq!(
            updated,
            pod(&[
                &format!("nginx:1.27@{D1}"),
                &format!("redis:7@{D1}"),
                &format!("busybox:1@{D1}"),
                &format!("alpine@{D2}"),
            ])
        );
        assert_eq!(plan.changes[1].action, Action::Update);
        assert_eq!(
            plan.changes[1]
                .old_digest
                .as_ref()
                .map(|d| d.to_string())
                .as_deref(),
            Some(D2)
        );
    }

    #[test]
    fn a_file_where_everything_is_current_is_not_in_the_plan() {
        let files = [scanned("pod.yaml", &pod(&[&format!("nginx:1.27@{D1}")]))];
        let plan = plan(
            &files,
            &answers(&[("nginx:1.27", Ok(D1))]),
            &Follow::default(),
        );
        assert!(plan.files.is_empty() && plan.changes.is_empty());
        assert_eq!(plan.summary.current, 1);
    }

    #[test]
    fn a_failed_image_is_reported_with_file_and_line_and_its_neighbours_still_move() {
        let files = [scanned(
            "apps/pod.yaml",
            &pod(&["nginx:1.27", "ghcr.io/acme/gone:1"]),
        )];
        let gone = RegistryError::NotFound {
            image: "ghcr.io/acme/gone:1".into(),
            host: "ghcr.io".into(),
            detail: String::new(),
        };
        let plan = plan(
            &files,
            &answers(&[("nginx:1.27", Ok(D1)), ("ghcr.io/acme/gone:1", Err(gone))]),
            &Follow::default(),
        );
        assert_eq!(plan.changes.len(), 1);
        assert_eq!(plan.summary.failed, 1);
        let problem = plan.problems[0].to_string();
        assert!(
            problem.starts_with("apps/pod.yaml:10: ghcr.io/acme/gone:1"),
            "{problem}"
        );
    }

    #[test]
    fn an_invalid_reference_is_a_problem_naming_line_and_column() {
        let files = [scanned("pod.yaml", &pod(&["Bad::Ref"]))];
        let plan = plan(&files, &BTreeMap::new(), &Follow::default());
        assert!(plan.files.is_empty());
        let problem = plan.problems[0].to_string();
        assert!(
            problem.starts_with("pod.yaml:8:12: invalid image reference"),
            "{problem}"
        );
    }

    #[test]
    fn references_to_resolve_skip_digest_only_and_invalid_values() {
        let files = [scanned(
            "pod.yaml",
            &pod(&["nginx", &format!("alpine@{D1}"), "Bad::Ref"]),
        )];
        let refs: Vec<String> = references_to_resolve(&files, &Follow::default())
            .iter()
            .map(|r| r.to_string())
            .collect();
        assert_eq!(refs, vec!["nginx"]);
    }

    #[test]
    fn a_kustomize_entry_gets_a_digest_key_next_to_its_tag() {
        let text = "images:\n- name: web\n  newName: ghcr.io/acme/web\n  newTag: \"5.0\"\n";
        let files = [scanned("kustomization.yaml", text)];
        let plan = plan(
            &files,
            &answers(&[("ghcr.io/acme/web:5.0", Ok(D1))]),
            &Follow::default(),
        );
        let updated = String::from_utf8(plan.files[0].updated.clone()).unwrap();
        assert_eq!(updated, format!("{text}  digest: {D1}\n"));
        assert_eq!(plan.changes[0].workload, Owner::Kustomization);
        assert_eq!(plan.changes[0].action, Action::Pin);
    }

    fn following(rules: &[(&str, crate::config::TagPolicy)], lists: &[(&str, &[&str])]) -> Follow {
        let rules: Vec<crate::config::PolicyRule> = rules
            .iter()
            .map(|(matches, policy)| crate::config::PolicyRule {
                matches: matches.to_string(),
                policy: policy.clone(),
            })
            .collect();
        Follow {
            policies: crate::policy::Policies::compile(&rules).unwrap(),
            tags: lists
                .iter()
                .map(|(image, tags)| {
                    let reference = Reference::parse(image).unwrap();
                    let tags = tags.iter().map(|t| t.to_string()).collect();
                    (crate::policy::RepositoryKey::of(&reference), Ok(tags))
                })
                .collect(),
            held: Default::default(),
            signatures: Default::default(),
            provenance: Default::default(),
            ages: Default::default(),
        }
    }

    fn semver(range: &str) -> crate::config::TagPolicy {
        crate::config::TagPolicy::Semver {
            range: range.into(),
        }
    }

    #[test]
    fn a_policy_moves_tag_and_digest_of_a_container_image_together() {
        let text = format!(
            "# web\napiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: web\n    image: \"ghcr.io/acme/web:1.4.2@{D1}\"  # pinned\n  - {{name: side, image: 'ghcr.io/acme/side:1'}}\r\n"
        );
        let files = [scanned("pod.yaml", &text)];
        let follow = following(
            &[("ghcr.io/acme/web", semver("~1.4"))],
            &[("ghcr.io/acme/web", &["1.4.2", "1.4.3", "1.5.0", "latest"])],
        );
        assert_eq!(
            references_to_resolve(&files, &follow)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [
                format!("ghcr.io/acme/web:1.4.3@{D1}"),
                "ghcr.io/acme/side:1".into()
            ]
        );
        let plan = plan(
            &files,
            &answers(&[
                ("ghcr.io/acme/web:1.4.3", Ok(D2)),
                ("ghcr.io/acme/side:1", Ok(D1)),
            ]),
            &follow,
        );
        let updated = String::from_utf8(plan.files[0].updated.clone()).unwrap();
        assert_eq!(
            updated,
            text.replace(&format!("web:1.4.2@{D1}"), &format!("web:1.4.3@{D2}"))
                .replace("side:1'", &format!("side:1@{D1}'"))
        );
        let web = &plan.changes[0];
        assert_eq!(
            (
                web.old_tag.as_deref(),
                web.new_tag.as_deref(),
                web.image.as_str()
            ),
            (Some("1.4.2"), Some("1.4.3"), "ghcr.io/acme/web:1.4.3")
        );
        assert_eq!(web.action, Action::Update);
        // A field whose tag stays says nothing of tags, in JSON too.
        assert_eq!(
            (
                plan.changes[1].old_tag.as_ref(),
                plan.changes[1].new_tag.as_ref()
            ),
            (None, None)
        );
        let json = serde_json::to_string(&plan.changes[1]).unwrap();
        assert!(!json.contains("_tag"), "{json}");
    }

    #[test]
    fn the_same_digest_under_a_new_tag_is_still_a_change() {
        let text = pod(&[&format!("ghcr.io/acme/job:build-99@{D1}")]);
        let files = [scanned("pod.yaml", &text)];
        let follow = following(
            &[(
                "ghcr.io/acme/*",
                crate::config::TagPolicy::Pattern {
                    pattern: "^build-(?P<n>[0-9]+)$".into(),
                    extract: "$n".into(),
                    order: crate::config::Order::Numerical,
                },
            )],
            &[("ghcr.io/acme/job", &["build-99", "build-120", "build-100"])],
        );
        let plan = plan(
            &files,
            &answers(&[("ghcr.io/acme/job:build-120", Ok(D1))]),
            &follow,
        );
        let updated = String::from_utf8(plan.files[0].updated.clone()).unwrap();
        assert_eq!(updated, text.replace("build-99", "build-120"));
    }

    #[test]
    fn a_policy_moves_a_kustomize_entry_new_tag_and_digest_byte_exactly() {
        let text = format!(
            "images:\r\n- name: web  # app\r\n  newName: ghcr.io/acme/web\r\n  newTag: 'v1.4.2' # tracked\r\n  digest: {D1}\r\n- {{name: api, newName: ghcr.io/acme/api, newTag: \"2.0.0\"}}\r\n"
        );
        let files = [scanned("kustomization.yaml", &text)];
        let follow = following(
            &[
                ("ghcr.io/acme/web", semver("~1.4")),
                ("ghcr.io/acme/*", semver("^2")),
            ],
            &[
                ("ghcr.io/acme/web", &["v1.4.2", "v1.4.3", "v2.0.0-rc.1"]),
                ("ghcr.io/acme/api", &["2.0.0", "2.1.0", "3.0.0"]),
            ],
        );
        let plan = plan(
            &files,
            &answers(&[
                ("ghcr.io/acme/web:v1.4.3", Ok(D2)),
                ("ghcr.io/acme/api:2.1.0", Ok(D1)),
            ]),
            &follow,
        );
        let updated = String::from_utf8(plan.files[0].updated.clone()).unwrap();
        assert_eq!(
            updated,
            format!(
                "images:\r\n- name: web  # app\r\n  newName: ghcr.io/acme/web\r\n  newTag: 'v1.4.3' # tracked\r\n  digest: {D2}\r\n- {{name: api, newName: ghcr.io/acme/api, newTag: \"2.1.0\", digest: {D1}}}\r\n"
            )
        );
        let moved: Vec<(Option<&str>, Option<&str>)> = plan
            .changes
            .iter()
            .map(|c| (c.old_tag.as_deref(), c.new_tag.as_deref()))
            .collect();
        assert_eq!(
            moved,
            [
                (Some("v1.4.2"), Some("v1.4.3")),
                (Some("2.0.0"), Some("2.1.0"))
            ]
        );
    }

    #[test]
    fn a_policy_that_matches_no_tag_leaves_the_field_alone_and_says_why() {
        let text = pod(&["ghcr.io/acme/web:1.4.2", "nginx:1.27"]);
        let files = [scanned("pod.yaml", &text)];
        let follow = following(
            &[("ghcr.io/acme/web", semver("~2"))],
            &[("ghcr.io/acme/web", &["1.4.2", "1.4.3"])],
        );
        let plan = plan(&files, &answers(&[("nginx:1.27", Ok(D1))]), &follow);
        assert_eq!(plan.changes.len(), 1);
        assert_eq!(
            plan.problems[0].to_string(),
            "pod.yaml:8: ghcr.io/acme/web: policy semver \"~2\" matches none of the 2 tag(s) the registry lists; the tag is left as it is"
        );
    }

    #[test]
    fn the_diff_names_the_file_and_shows_one_line_moving() {
        let files = [scanned("pod.yaml", &pod(&["nginx:1.27"]))];
        let plan = plan(
            &files,
            &answers(&[("nginx:1.27", Ok(D1))]),
            &Follow::default(),
        );
        let diff = &plan.files[0].diff;
        assert!(
            diff.starts_with("--- a/pod.yaml\n+++ b/pod.yaml\n"),
            "{diff}"
        );
        assert!(diff.contains("-    image: nginx:1.27\n"), "{diff}");
        assert!(
            diff.contains(&format!("+    image: nginx:1.27@{D1}\n")),
            "{diff}"
        );
    }

    /// Everything a user sees of a plan, comparable.
    fn shown(plan: &Plan) -> String {
        let files: Vec<String> = plan
            .files
            .iter()
            .map(|f| format!("{}\n{}", f.path.display(), f.diff))
            .collect();
        let problems: Vec<String> = plan.problems.iter().map(ToString::to_string).collect();
        format!(
            "{:?}\n{files:?}\n{:?}\n{problems:?}",
            plan.summary, plan.changes
        )
    }

    #[test]
    fn planning_as_answers_arrive_gives_the_plan_of_all_answers_at_once_in_any_order() {
        let gone = RegistryError::NotFound {
            image: "ghcr.io/acme/gone:1".into(),
            host: "ghcr.io".into(),
            detail: String::new(),
        };
        let files = [
            scanned("a.yaml", &pod(&["nginx:1.27", "ghcr.io/acme/gone:1"])),
            scanned("b.yaml", &pod(&[&format!("alpine@{D2}"), "Bad::Ref"])),
            scanned("c.yaml", &pod(&["nginx:1.27", &format!("redis:7@{D2}")])),
            scanned("d.yaml", &pod(&[&format!("busybox:1@{D1}")])),
            scanned("e.yaml", &pod(&["never/answered:1"])),
        ];
        let given = [
            ("nginx:1.27", Ok(D1)),
            ("ghcr.io/acme/gone:1", Err(gone)),
            ("redis:7", Ok(D1)),
            ("busybox:1", Ok(D1)),
        ];
        let all_at_once = plan(&files, &answers(&given), &Follow::default());
        assert_eq!(all_at_once.files.len(), 2, "a.yaml and c.yaml move");
        assert_eq!(
            all_at_once.summary.failed, 3,
            "gone, Bad::Ref, never answered"
        );

        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]] {
            let follow = Follow::default();
            let mut planner = Planner::new(&files, &follow);
            for i in order {
                let (key, result) = answers(&given[i..=i]).into_iter().next().unwrap();
                planner.answer(key, result);
            }
            assert_eq!(
                shown(&planner.finish()),
                shown(&all_at_once),
                "order {order:?}"
            );
        }
    }

    #[test]
    fn a_hold_comment_on_the_field_line_keeps_it_and_is_reported_with_its_words() {
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27 # tagpin: hold until CVE-2026-1 is fixed\n      - name: side\n        image: nginx:1.27\n";
        let files = [scanned("web.yaml", text)];
        let plan = plan(
            &files,
            &answers(&[("nginx:1.27", Ok(D1))]),
            &Follow::default(),
        );
        assert_eq!(plan.changes.len(), 1, "the other container still moves");
        assert_eq!(plan.changes[0].container, "side");
        assert_eq!(plan.summary.held, 1);
        let held = &plan.held[0];
        assert_eq!((held.line, held.container.as_str()), (9, "web"));
        assert_eq!(held.value, "nginx:1.27");
        assert_eq!(held.would_be.to_string(), D1);
        assert_eq!(held.reason, "# tagpin: hold until CVE-2026-1 is fixed");
        let updated = String::from_utf8(plan.files[0].updated.clone()).unwrap();
        assert!(
            updated.contains("image: nginx:1.27 # tagpin: hold until CVE-2026-1 is fixed\n"),
            "the held line is byte for byte as it was:\n{updated}"
        );
        assert!(updated.contains(&format!("image: nginx:1.27@{D1}\n")));
        assert_eq!(
            held.to_string(),
            format!("web.yaml:9 Deployment/web (web): held at nginx:1.27, not moved to {D1}: # tagpin: hold until CVE-2026-1 is fixed")
        );
    }

    #[test]
    fn a_digest_without_accepted_provenance_fails_its_field_and_the_rest_of_the_pass_goes_on() {
        let rule = crate::provenance::tests::acme_rule("https://ci\\.example/.+");
        let rules = crate::provenance::ProvenanceRules::compile(&[rule]).unwrap();
        let text = pod(&["ghcr.io/acme/web:1", "ghcr.io/acme/api:1", "nginx:1.27"]);
        let files = [scanned("p.yaml", &text)];
        let resolved = answers(&[
            ("ghcr.io/acme/web:1", Ok(D1)),
            ("ghcr.io/acme/api:1", Ok(D2)),
            ("nginx:1.27", Ok(D2)),
        ]);
        let mut follow = Follow {
            provenance: crate::provenance::Verdicts::new(rules),
            ..Follow::default()
        };
        // Both acme digests are looked up; nginx, under no entry, is not.
        let wanted = provenance_to_check(&files, &resolved, &follow);
        assert_eq!(wanted.len(), 2, "{wanted:?}");
        let subject = |image: &str, digest: &str| {
            crate::reference::Subject::of(
                &Reference::parse(image).unwrap(),
                &Digest::parse(digest).unwrap(),
            )
        };
        follow.provenance.checked.insert(
            subject("ghcr.io/acme/web:1", D1),
            Ok(crate::provenance::Attested {
                builder: "https://ci.example/runner".into(),
                source: "https://github.com/acme/web@refs/tags/v1".into(),
                signer: crate::signature::Signer("key k.pub".into()),
            }),
        );
        follow.provenance.checked.insert(
            subject("ghcr.io/acme/api:1", D2),
            Err(crate::provenance::Refusal::Builder {
                rule: 0,
                found: "https://evil.example/runner".into(),
            }),
        );
        assert!(provenance_to_check(&files, &resolved, &follow).is_empty());
        let plan = plan(&files, &resolved, &follow);
        let problems: Vec<String> = plan.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [format!("p.yaml:10: ghcr.io/acme/api:1@{D2}: not pinned: provenance built by https://evil.example/runner, not a builder images.provenance[0].builder_id accepts")]
        );
        let moved: Vec<(&str, Option<String>)> = plan
            .changes
            .iter()
            .map(|c| {
                (
                    c.image.as_str(),
                    c.provenance.as_ref().map(|p| p.source.clone()),
                )
            })
            .collect();
        assert_eq!(
            moved,
            [
                (
                    "ghcr.io/acme/web:1",
                    Some("https://github.com/acme/web@refs/tags/v1".into())
                ),
                ("docker.io/library/nginx:1.27", None)
            ]
        );
        let json = serde_json::to_value(&plan.changes[0]).unwrap();
        assert_eq!(
            json["provenance"],
            serde_json::json!({"verified": true, "builder": "https://ci.example/runner", "source": "https://github.com/acme/web@refs/tags/v1"})
        );
    }

    /// `follow` requiring digests of `ghcr.io/acme/*` to be an hour old, at `now`, with `born`
    /// for the digests dated.
    fn aged(now: i64, born: &[(&str, &str, i64)]) -> Follow {
        let rules = crate::age::MinimumAges::compile([(
            "ghcr.io/acme/*",
            std::time::Duration::from_secs(3600),
        )])
        .unwrap();
        let mut ages = crate::age::Ages::new(rules, now);
        for (image, digest, at) in born {
            let subject = crate::age::Subject::of(
                &Reference::parse(image).unwrap(),
                &Digest::parse(digest).unwrap(),
            );
            let born = crate::age::Born {
                at: *at,
                source: crate::age::Source::Created,
            };
            ages.born.insert(subject, born);
        }
        Follow {
            ages,
            ..Follow::default()
        }
    }

    #[test]
    fn a_digest_too_young_is_held_at_the_pinned_one_and_the_rest_of_the_pass_goes_on() {
        const NOW: i64 = 1_796_000_000;
        let text = pod(&[
            &format!("ghcr.io/acme/web:1@{D1}"),
            "ghcr.io/acme/api:1",
            "nginx:1.27",
        ]);
        let files = [scanned("p.yaml", &text)];
        let resolved = answers(&[
            ("ghcr.io/acme/web:1", Ok(D2)),
            ("ghcr.io/acme/api:1", Ok(D2)),
            ("nginx:1.27", Ok(D2)),
        ]);
        let young = aged(
            NOW,
            &[
                ("ghcr.io/acme/web:1", D2, NOW - 120),
                ("ghcr.io/acme/api:1", D2, NOW - 7200),
            ],
        );
        // What must be dated: both acme digests, never nginx (no entry) nor a dated one again.
        let undated = ages_to_check(&files, &resolved, &aged(NOW, &[]));
        assert_eq!(undated.len(), 2, "{undated:?}");
        assert!(ages_to_check(&files, &resolved, &young).is_empty());

        let plan = plan(&files, &resolved, &young);
        // web stays at D1: its new digest is two minutes old.
        assert_eq!(plan.held.len(), 1);
        let held = &plan.held[0];
        assert_eq!(
            (held.line, held.value.as_str()),
            (8, format!("ghcr.io/acme/web:1@{D1}").as_str())
        );
        assert_eq!(held.would_be.to_string(), D2);
        assert_eq!(held.commit, None);
        let age = held.age.as_ref().unwrap();
        assert_eq!(age.seconds, 120);
        assert_eq!(age.eligible_at, crate::age::rfc3339(NOW - 120 + 3600));
        assert!(
            held.reason
                .contains("younger than the minimum age 1h: eligible at"),
            "{}",
            held.reason
        );
        // api, two hours old, and nginx, under no entry, move; only api says its age.
        let moved: Vec<(&str, Option<i64>)> = plan
            .changes
            .iter()
            .map(|c| (c.image.as_str(), c.age.as_ref().map(|a| a.seconds)))
            .collect();
        assert_eq!(
            moved,
            [
                ("ghcr.io/acme/api:1", Some(7200)),
                ("docker.io/library/nginx:1.27", None)
            ]
        );
        let updated = String::from_utf8(plan.files[0].updated.clone()).unwrap();
        assert!(updated.contains(&format!("image: ghcr.io/acme/web:1@{D1}\n")));

        // An hour later the same digest moves.
        let later = aged(
            NOW + 3600,
            &[
                ("ghcr.io/acme/web:1", D2, NOW - 120),
                ("ghcr.io/acme/api:1", D2, NOW - 7200),
            ],
        );
        let plan = super::plan(&files, &resolved, &later);
        assert!(plan.held.is_empty(), "{:?}", plan.held);
        assert!(plan.changes.iter().any(|c| c.image == "ghcr.io/acme/web:1"));
    }

    #[test]
    fn a_hold_is_a_yaml_comment_on_the_field_line_and_never_text_inside_a_string() {
        // Minified JSON: one line, no comments; a string that says "# tagpin: hold" is text.
        let json = r##"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{"note":"x # tagpin: hold"}},"spec":{"containers":[{"name":"c","image":"nginx:1.27"},{"name":"d","image":"nginx:1.27","args":["# tagpin: hold"]}]}}"##;
        let json_plan = plan(
            &[scanned("p.json", json)],
            &answers(&[("nginx:1.27", Ok(D1))]),
            &Follow::default(),
        );
        assert_eq!((json_plan.changes.len(), json_plan.summary.held), (2, 0));
        // A flow mapping: the comment after it is on the field's line and holds.
        let flow = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: c, image: nginx:1.27}  # rolled back # tagpin: hold\n";
        let flow_plan = plan(
            &[scanned("p.yaml", flow)],
            &answers(&[("nginx:1.27", Ok(D1))]),
            &Follow::default(),
        );
        assert_eq!((flow_plan.changes.len(), flow_plan.summary.held), (0, 1));
        assert_eq!(flow_plan.held[0].reason, "# tagpin: hold");
    }

    #[test]
    fn only_a_comment_that_says_tagpin_hold_holds_and_a_current_field_is_not_reported() {
        // The value starts after `image: `, at column 8.
        let line = |l: &str| hold_comment(l.as_bytes(), 1, 8);
        assert_eq!(
            line("image: a:1 # tagpin: hold"),
            Some("# tagpin: hold".into())
        );
        assert_eq!(
            line("image: a:1  #tagpin:hold\r"),
            Some("# tagpin:hold".into())
        );
        assert_eq!(line("image: a:1 # keep: tagpin: hold"), None);
        assert_eq!(line("image: a:1 # tagpin: pin"), None);
        assert_eq!(
            line("image: a:1#tagpin: hold"),
            None,
            "a # inside the value"
        );
        assert_eq!(line("image: a:1"), None);
        assert_eq!(
            line("image: a:1 # pinned for the audit # tagpin: hold until May"),
            Some("# tagpin: hold until May".into()),
            "a hold after other words of the comment"
        );
        assert_eq!(
            line("image: \"a:1 # tagpin: hold\""),
            None,
            "inside the quoted value"
        );
        assert_eq!(
            hold_comment(b"a: 1\nimage: a:1 # tagpin: hold\n", 2, 8),
            Some("# tagpin: hold".into())
        );
        assert_eq!(hold_comment(b"a: 1\n", 5, 1), None);
        assert_eq!(hold_comment(b"a: 1\n", 0, 1), None);
        assert_eq!(hold_comment(b"a: 1\n", 1, 0), None);
        let pinned = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: c\n    image: nginx:1.27@{D1} # tagpin: hold\n"
        );
        let plan = plan(
            &[scanned("p.yaml", &pinned)],
            &answers(&[("nginx:1.27", Ok(D1))]),
            &Follow::default(),
        );
        assert_eq!((plan.summary.current, plan.summary.held), (1, 0));
        let plan = plan_again(&pinned, D2);
        assert_eq!((plan.summary.to_update, plan.summary.held), (0, 1));
        assert!(plan.files.is_empty(), "nothing to write");
    }

    fn plan_again(text: &str, digest: &str) -> Plan {
        plan(
            &[scanned("p.yaml", text)],
            &answers(&[("nginx:1.27", Ok(digest))]),
            &Follow::default(),
        )
    }
}
