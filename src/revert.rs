//! Acting on a Failed verdict (`verify.on_failure: revert`, issue #28): a change tagpin made
//! that landed and whose verdict is Failed and final is reverted, byte for byte, and the
//! digests it moved to are held so that no pass pins them again until their tag moves.
//!
//! - What is reverted: the change commit (tagpin's own pin commit in commit mode; the merge
//!   commit of tagpin's change request), exactly as `git revert` would, on the branch's tip.
//! - Never: a person's commit, a revert, a change that pinned an image for the first time
//!   (there is no earlier digest to restore), a change whose fields a later commit moved
//!   again, a change the failure is not about. Each refusal is a sentence naming why.
//! - Idempotent without local state: once the revert landed, the fields no longer hold the
//!   failed digests, so the next round finds nothing to revert; an open revert change request
//!   is updated in place, and one a person closed is left closed ([`crate::writer`]).
//! - Holds: the revert's commit message carries `Tagpin-Held: <repository>@<digest>` trailers,
//!   read back from the branch's history by every pass ([`holds`]).

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::config::{Config, WriteMode};
use crate::forge::ForgeClient;
use crate::git::{off_runtime, GitError, Mirror};
use crate::manifest::{self, ImageField};
use crate::plan::{Action, Change};
use crate::policy::{Hold, Holds};
use crate::proposal::{body, PlanBlock};
use crate::reference::{Digest, Reference};
use crate::verify::judge::check::Check;
use crate::verify::judge::verdict::State;
use crate::workload::Owner;
use crate::writer::{self, Outcome, Planned, Proposal, WriteError};

/// The trailer naming the change a revert undoes.
pub const REVERTS_TRAILER: &str = "Tagpin-Reverts";
/// The trailer naming a digest held by a revert: `Tagpin-Held: ghcr.io/acme/web@sha256:…`.
pub const HELD_TRAILER: &str = "Tagpin-Held";
/// The label of a revert change request (besides the configured ones).
pub const REVERT_LABEL: &str = "tagpin-revert";

/// One image field a change moved from one digest to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub file: PathBuf,
    pub line: usize,
    pub workload: Owner,
    pub container: String,
    /// The reference as written after the change, and its repository.
    pub value: String,
    pub repository: String,
    pub from: Option<Digest>,
    pub to: Digest,
    pub from_value: String,
}

impl Moved {
    /// `file:line workload (container)`: the field, as a refusal names it.
    fn place(&self) -> String {
        format!(
            "{}:{} {} ({})",
            self.file.display(),
            self.line,
            self.workload,
            self.container
        )
    }
}

/// Why a change is not reverted: said, never acted on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// What a revert did.
#[derive(Debug)]
pub enum Reverted {
    /// Commit mode: the revert commit pushed.
    Committed { commit: String, fields: usize },
    /// Pull-request mode: the revert change request, as the writer left it.
    Proposed(Outcome),
    /// Not reverted, and why.
    Refused(Refusal),
}

/// A revert that could not be written now (a lost race, the forge down): tried again at the
/// next round.
#[derive(Debug, thiserror::Error)]
pub enum RevertError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("configuration: {0}")]
    Config(#[from] crate::manifest::ManifestError),
}

fn repository_of(value: &str) -> String {
    Reference::parse(value)
        .map(|r| r.canonical_name())
        .unwrap_or_else(|_| value.to_string())
}

/// The fields a change moved in one file, from its content before and after: the same fields
/// in the same order, only digests moved. Anything else (a field added, removed, renamed,
/// another repository) is a person's change, refused.
pub fn moved_fields(
    file: &Path,
    before: &[ImageField],
    after: &[ImageField],
) -> Result<Vec<Moved>, Refusal> {
    let refuse = |why: &str| Refusal(format!("{}: {why}", file.display()));
    if before.len() != after.len() {
        return Err(refuse("the change adds or removes image fields"));
    }
    let mut moved = Vec::new();
    for (old, new) in before.iter().zip(after) {
        let (from, to) = (old.pinned_digest(), new.pinned_digest());
        if from == to && old.value == new.value {
            continue;
        }
        if old.owner() != new.owner() || repository_of(&old.value) != repository_of(&new.value) {
            return Err(refuse("the change moves more than digests"));
        }
        let Some(to) = to else {
            return Err(refuse("the change removes a digest"));
        };
        let (workload, container) = new.owner();
        moved.push(Moved {
            file: file.to_path_buf(),
            line: new.line,
            workload,
            container,
            repository: repository_of(&new.value),
            value: new.value.clone(),
            from,
            to,
            from_value: old.value.clone(),
        });
    }
    Ok(moved)
}

/// [`moved_fields`] of one file, from its bytes before and after, as the configuration's Helm
/// options scan them; a file that cannot be scanned is refused, naming it.
fn moved_in(
    path: &Path,
    before: &[u8],
    after: &[u8],
    helm: &crate::manifest::HelmOptions,
) -> Result<Vec<Moved>, Refusal> {
    let scan = |bytes: &[u8]| {
        manifest::scan_with_options(path, bytes, helm)
            .map(|o| o.fields)
            .map_err(|e| Refusal(e.to_string()))
    };
    moved_fields(path, &scan(before)?, &scan(after)?)
}

/// Whether the change whose fields are `moved` may be reverted for the failure `check`
/// reports, given which of its fields the tip still pins as it left them (`still_pinned`).
/// Pure: every refusal is a sentence.
pub fn decide(moved: &[Moved], check: &Check, still_pinned: &[bool]) -> Result<(), Refusal> {
    if check.state != State::Failed {
        return Err(Refusal(format!(
            "the verdict is {}, not Failed",
            check.state.as_str()
        )));
    }
    if moved.is_empty() {
        return Err(Refusal("the change moved no image field".into()));
    }
    if let Some(first) = moved.iter().find(|m| m.from.is_none()) {
        return Err(Refusal(format!(
            "{} was pinned for the first time: there is no earlier digest to restore",
            first.place()
        )));
    }
    let failed: BTreeSet<&Digest> = check
        .verdicts
        .iter()
        .filter(|v| v.state == State::Failed)
        .map(|v| &v.pinned_digest)
        .collect();
    if !moved.iter().any(|m| failed.contains(&m.to)) {
        return Err(Refusal(
            "the failure is not about a digest this change pinned".into(),
        ));
    }
    if let Some((m, _)) = moved.iter().zip(still_pinned).find(|(_, still)| !**still) {
        return Err(Refusal(format!(
            "a later commit moved {} again; not reverted",
            m.place()
        )));
    }
    Ok(())
}

/// One `Tagpin-Held: <repository>@<digest>` trailer of a commit message: what the commit
/// says it holds. A claim is only words: [`holds_at`] honours it when the commit's own change
/// backs it ([`backing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub repository: String,
    pub digest: Digest,
}

/// The `Tagpin-Held` claims of a commit message, in order; malformed lines are passed over.
pub fn claims(message: &str) -> Vec<Claim> {
    message
        .lines()
        .filter_map(|line| {
            let value = line.strip_prefix(HELD_TRAILER)?.strip_prefix(':')?;
            let (repository, digest) = value.trim().rsplit_once('@')?;
            let digest = Digest::parse(digest).ok()?;
            // Tagpin writes the canonical name; a hand-written spelling is read the same way.
            let repository = repository_of(repository);
            Some(Claim { repository, digest })
        })
        .collect()
}

/// The field that backs `claim` among the fields its commit moved (`moved`, with whether the
/// tip still pins each as the commit left it, `still`): one of the claimed repository that
/// the commit itself moved away from the claimed digest, and that still pins what the commit
/// restored. Pure.
///
/// This is what makes a hold tagpin's and not anyone's words: a revert moves the field off
/// the failed digest in the very commit whose message carries the trailer, so the trailer
/// names what that commit did. A trailer in any other commit (a `docs: fix typo` merged with
/// it) backs nothing and holds nothing. Once a later commit moves the field again (the tag
/// moved and it was pinned, or a person pinned it by hand), the hold has ended.
pub fn backing<'m>(claim: &Claim, moved: &'m [Moved], still: &[bool]) -> Option<&'m Moved> {
    moved
        .iter()
        .zip(still)
        .find(|(m, still)| {
            **still && m.repository == claim.repository && m.from.as_ref() == Some(&claim.digest)
        })
        .map(|(m, _)| m)
}

/// The hold a backed claim of `commit` makes.
fn held_by_revert(commit: &str, digest: &Digest) -> Hold {
    let short = &commit[..commit.len().min(12)];
    Hold {
        reason: format!("revert {short} moved this image away from {digest}; it is pinned again once its tag points to another digest"),
        commit: commit.to_string(),
    }
}

/// How many first-parent commits are read for a person's revert, and the most files such a
/// commit may change to be read (a rollback by hand touches a few files; a pass or a merge
/// of many pins is not a rollback and would cost a scan of every file it changed).
pub const PERSON_REVERT_DEPTH: usize = 50;
pub const PERSON_REVERT_MAX_FILES: usize = 20;

/// The most files a commit carrying `Tagpin-Held` trailers may change to be read: a revert of
/// a pass over a large repository restores many files, but a commit that changes more than
/// this is not read (its trailers hold nothing), so no merged commit can make every pass scan
/// an unbounded number of files.
pub const HELD_MAX_FILES: usize = 5_000;

/// The image fields of the tip, scanned once per file however many holds ask about it.
struct TipFields<'a> {
    mirror: &'a Mirror,
    tip: git2::Oid,
    helm: &'a crate::manifest::HelmOptions,
    files: HashMap<PathBuf, Vec<ImageField>>,
}

impl<'a> TipFields<'a> {
    fn new(mirror: &'a Mirror, tip: git2::Oid, helm: &'a crate::manifest::HelmOptions) -> Self {
        TipFields {
            mirror,
            tip,
            helm,
            files: HashMap::new(),
        }
    }

    /// Whether the tip still pins each of `moved` where its commit left it: the same field
    /// (file, workload, container) at the digest the commit moved it to.
    fn still_pinned(&mut self, moved: &[Moved]) -> Result<Vec<bool>, GitError> {
        let mut out = Vec::with_capacity(moved.len());
        for m in moved {
            let fields = match self.files.entry(m.file.clone()) {
                Entry::Occupied(fields) => fields.into_mut(),
                Entry::Vacant(slot) => {
                    let fields = match self.mirror.file_at(self.tip, &m.file)? {
                        Some(bytes) => manifest::scan_with_options(&m.file, &bytes, self.helm)
                            .map(|o| o.fields)
                            .unwrap_or_default(),
                        None => Vec::new(),
                    };
                    slot.insert(fields)
                }
            };
            out.push(fields.iter().any(|f| {
                f.owner() == (m.workload.clone(), m.container.clone())
                    && f.pinned_digest().as_ref() == Some(&m.to)
            }));
        }
        Ok(out)
    }
}

/// The fields a commit moved against its first parent, over every file it changed (at most
/// `max`); empty when it adds or removes files, changes more than `max`, or changes a file in
/// a way that is more than digests.
pub fn moved_by(
    mirror: &Mirror,
    commit: git2::Oid,
    helm: &crate::manifest::HelmOptions,
    max: usize,
) -> Result<Vec<Moved>, GitError> {
    let Some(changed) = mirror.changed_files_within(commit, None, max)? else {
        return Ok(Vec::new());
    };
    let mut moved = Vec::new();
    for (path, before, after) in &changed {
        moved.extend(moved_in(path, before, after, helm).unwrap_or_default());
    }
    Ok(moved)
}

/// The holds of `tip`'s history, for a pass's planner (sync and promote alike):
///
/// - each `Tagpin-Held` trailer of any commit of the history (every ancestor, however far
///   back: a hold does not wear off by commit count), honoured only where the commit's own
///   change backs it ([`backing`]) and, with `author.signing`, only in a commit signed with
///   tagpin's key ([`Mirror::is_trusted`]);
/// - the digests a person's commit moved a field back from ([`person_reverts`]).
///
/// A hold lasts while the field still pins the digest its revert restored.
pub fn holds_at(
    mirror: &Mirror,
    tip: git2::Oid,
    helm: &crate::manifest::HelmOptions,
) -> Result<Holds, GitError> {
    let mut holds = Holds::default();
    let mut at_tip = TipFields::new(mirror, tip, helm);
    for (commit, message) in mirror.messages_mentioning(tip, HELD_TRAILER)? {
        let claims = claims(&message);
        if claims.is_empty() {
            continue;
        }
        if !mirror.is_trusted(commit)? {
            tracing::debug!(
                "commit {commit}: its {HELD_TRAILER} trailers hold nothing: it is not signed with tagpin's key (author.signing)"
            );
            continue;
        }
        let moved = moved_by(mirror, commit, helm, HELD_MAX_FILES)?;
        let still = at_tip.still_pinned(&moved)?;
        let commit = commit.to_string();
        for claim in &claims {
            if backing(claim, &moved, &still).is_some() {
                let hold = held_by_revert(&commit, &claim.digest);
                holds.hold(&claim.repository, &claim.digest.to_string(), hold);
            } else {
                tracing::debug!(
                    "commit {commit}: {HELD_TRAILER}: {}@{} holds nothing: the commit does not move that image away from that digest, or a later commit moved it again",
                    claim.repository,
                    claim.digest
                );
            }
        }
    }
    person_reverts(mirror, tip, helm, &mut at_tip, &mut holds)?;
    Ok(holds)
}

/// One field's digest moving in one commit: `(file, workload, container, repository)`,
/// from, to.
type Transition = ((PathBuf, Owner, String, String), Digest, Digest);

/// The digest moves of the files a commit changed (at most [`PERSON_REVERT_MAX_FILES`]),
/// as [`moved_fields`] finds them; files it cannot read are passed over.
fn transitions(
    mirror: &Mirror,
    commit: git2::Oid,
    helm: &crate::manifest::HelmOptions,
    only: Option<&Path>,
) -> Result<Vec<Transition>, GitError> {
    let max = match only {
        Some(_) => usize::MAX,
        None => PERSON_REVERT_MAX_FILES,
    };
    let Some(changed) = mirror.changed_files_within(commit, only, max)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (path, before, after) in &changed {
        // A file that cannot be read, or a change of more than digests, moves no digest back.
        for m in moved_in(path, before, after, helm).unwrap_or_default() {
            if let Some(from) = m.from {
                out.push((
                    (path.clone(), m.workload, m.container, m.repository),
                    from,
                    m.to,
                ));
            }
        }
    }
    Ok(out)
}

/// A person's revert: a commit tagpin did not write that moves a field from digest B back to
/// a digest A the field moved from to B in an older commit of the branch (first parents, at
/// most [`PERSON_REVERT_DEPTH`]). B is held: tagpin does not pin that image to it again
/// until its tag points to another digest.
fn person_reverts(
    mirror: &Mirror,
    tip: git2::Oid,
    helm: &crate::manifest::HelmOptions,
    at_tip: &mut TipFields<'_>,
    holds: &mut Holds,
) -> Result<(), GitError> {
    let history = mirror.first_parents(tip, PERSON_REVERT_DEPTH)?;
    // The digest moves of one file in one older commit, read once however many moves back
    // ask about that file.
    let mut earlier: HashMap<(git2::Oid, PathBuf), Vec<Transition>> = HashMap::new();
    for (at, commit) in history.iter().enumerate() {
        if mirror.is_own_commit(*commit)? {
            continue;
        }
        let reverted = moved_by(mirror, *commit, helm, PERSON_REVERT_MAX_FILES)?;
        let still = at_tip.still_pinned(&reverted)?;
        for (m, _) in reverted.iter().zip(&still).filter(|(_, still)| **still) {
            // The field went back from `back_from` to `back_to`, which it still pins.
            let Some(back_from) = m.from.clone() else {
                continue;
            };
            let (back_to, file) = (m.to.clone(), m.file.clone());
            let key = (
                file.clone(),
                m.workload.clone(),
                m.container.clone(),
                m.repository.clone(),
            );
            let mut moved_there = false;
            for older in &history[at + 1..] {
                let moves = match earlier.entry((*older, file.clone())) {
                    Entry::Occupied(moves) => moves.into_mut(),
                    Entry::Vacant(slot) => {
                        slot.insert(transitions(mirror, *older, helm, Some(&file))?)
                    }
                };
                moved_there = moves
                    .iter()
                    .any(|(k, from, to)| *k == key && *from == back_to && *to == back_from);
                if moved_there {
                    break;
                }
            }
            if !moved_there {
                continue;
            }
            let short = &commit.to_string()[..12];
            let reason = format!("commit {short} moved {} back from {back_from} to {back_to} by hand; it is pinned again once its tag points to another digest", file.display());
            let hold = Hold {
                reason,
                commit: commit.to_string(),
            };
            holds.hold(&key.3, &back_from.to_string(), hold);
        }
    }
    Ok(())
}

/// What a revert works with.
pub struct Reverter<'a> {
    pub config: &'a Config,
    pub mirror: &'a Mirror,
    pub forge: Option<&'a ForgeClient>,
}

/// The change to revert and what it moved: `change` is its commit on the target branch,
/// `head` (a change request's) the commit whose tagpin authorship proves it is tagpin's.
pub struct Candidate<'c> {
    pub change: git2::Oid,
    pub own: git2::Oid,
    pub check: &'c Check,
}

impl Reverter<'_> {
    /// Reverts `candidate` if [`decide`] allows it, by a commit or a change request as the
    /// configuration writes.
    pub async fn revert(&self, candidate: &Candidate<'_>) -> Result<Reverted, RevertError> {
        let branch = &self.config.repository.branch;
        let Some(tip) = self.mirror.tip(branch) else {
            return Ok(Reverted::Refused(Refusal(format!("no branch {branch}"))));
        };
        let found = off_runtime(|| self.gather(candidate, tip))?;
        let (moved, files) = match found {
            Ok(found) => found,
            Err(refusal) => return Ok(Reverted::Refused(refusal)),
        };
        let short = candidate.change.to_string()[..12].to_string();
        let reason = first_failure(candidate.check);
        let images: BTreeSet<&str> = moved.iter().map(|m| m.repository.as_str()).collect();
        let title = format!("Revert pin of {} image(s): {reason}", images.len());
        let evidence = evidence(candidate, &moved);
        let held: BTreeSet<String> = moved
            .iter()
            .map(|m| format!("{HELD_TRAILER}: {}@{}", m.repository, m.to))
            .collect();
        let message = format!(
            "{title}\n\n{evidence}\n{REVERTS_TRAILER}: {}\n{}\n",
            candidate.change,
            held.into_iter().collect::<Vec<_>>().join("\n")
        );
        let change = Planned {
            tip,
            updates: &files,
            message: &message,
        };
        match (self.config.mode, self.forge) {
            (WriteMode::Commit, _) => {
                let author = &self.config.author;
                let outcome =
                    writer::commit(self.mirror, author, self.forge, branch, &change, 1).await?;
                let commit = match outcome {
                    Outcome::Committed { commit, .. } => commit,
                    _ => String::new(),
                };
                tracing::warn!("reverted {short} on {branch} as {commit}: {reason}");
                Ok(Reverted::Committed {
                    commit,
                    fields: moved.len(),
                })
            }
            (WriteMode::PullRequest, Some(forge)) => {
                let block = restore_block(branch, &moved);
                let body = format!(
                    "tagpin reverts {short}: its verdict on the cluster is **Failed**.\n\n{evidence}\n{}",
                    body::render(&block)
                );
                let mut labels = self.config.pull_request.labels.clone();
                labels.push(REVERT_LABEL.to_string());
                let revert_branch =
                    format!("{}revert/{branch}", self.config.pull_request.branch_prefix);
                let proposal = Proposal {
                    branch: &revert_branch,
                    target: branch,
                    block: &block,
                    title: &title,
                    body: &body,
                    refresh_body: true,
                    labels: &labels,
                    change,
                };
                let outcome =
                    writer::propose(self.mirror, forge, &self.config.author, &proposal).await?;
                Ok(Reverted::Proposed(outcome))
            }
            (WriteMode::PullRequest, None) => Ok(Reverted::Refused(Refusal(
                "pull-request mode needs a forge to propose the revert".into(),
            ))),
        }
    }

    /// What the change moved, checked against the tip, and the files its revert writes.
    fn gather(
        &self,
        candidate: &Candidate<'_>,
        tip: git2::Oid,
    ) -> Result<Result<(Vec<Moved>, crate::git::Files), Refusal>, RevertError> {
        let refuse = |why: String| Ok(Err(Refusal(why)));
        let short = &candidate.change.to_string()[..12];
        if !self.mirror.is_own_commit(candidate.own).unwrap_or(false) {
            return refuse(format!(
                "{short} is not a commit tagpin wrote; never reverted"
            ));
        }
        let message = self.mirror.messages(candidate.change, 1)?;
        if message.iter().any(|(_, m)| m.contains(REVERTS_TRAILER)) {
            return refuse(format!(
                "{short} is itself a revert; tagpin never reverts a revert"
            ));
        }
        let Some(changed) = self.mirror.changed_files(candidate.change)? else {
            return refuse(format!("{short} adds or removes files: not a pin"));
        };
        let helm = self.config.helm.options()?;
        let mut moved = Vec::new();
        for (path, before, after) in &changed {
            match moved_in(path, before, after, &helm) {
                Ok(here) => moved.extend(here),
                Err(refusal) => return Ok(Err(refusal)),
            }
        }
        let still = TipFields::new(self.mirror, tip, &helm).still_pinned(&moved)?;
        if let Err(refusal) = decide(&moved, candidate.check, &still) {
            return Ok(Err(refusal));
        }
        let paths: Vec<&Path> = changed.iter().map(|(path, _, _)| path.as_path()).collect();
        match self.mirror.revert_files(candidate.change, tip, &paths)? {
            Some(files) => Ok(Ok((moved, files))),
            None => refuse(format!(
                "the revert of {short} does not apply cleanly on the tip of {}",
                self.config.repository.branch
            )),
        }
    }
}

/// What a revert did, in one sentence for logs and Events.
pub fn describe(done: &Reverted, noun: crate::forge::ChangeRequestNoun) -> String {
    match done {
        Reverted::Committed { commit, fields } => {
            format!("reverted: commit {commit} restores {fields} field(s)")
        }
        Reverted::Proposed(outcome) => match outcome {
            Outcome::PullRequestOpened { number, url, .. }
            | Outcome::PullRequestUpdated { number, url, .. }
            | Outcome::PullRequestUnchanged { number, url, .. } => {
                format!("revert proposed in {}: {url}", noun.name(*number))
            }
            Outcome::ClosedByHand { number, .. } => format!(
                "the revert {} was closed by hand; not reopened",
                noun.name(*number)
            ),
            other => format!("revert: {other:?}"),
        },
        Reverted::Refused(why) => format!("not reverted: {why}"),
    }
}

/// The first Failed verdict in one line: what the revert is for.
fn first_failure(check: &Check) -> String {
    check
        .verdicts
        .iter()
        .find(|v| v.state == State::Failed)
        .map(|v| format!("{} ({}): {}", v.workload, v.container, v.reason))
        .unwrap_or_else(|| check.summary.clone())
}

/// The evidence of a revert: the failed verdicts (workload, container, pinned digest, pods,
/// reason with the kubelet's words), the change reverted, and the digests restored.
fn evidence(candidate: &Candidate<'_>, moved: &[Moved]) -> String {
    let mut out = format!("Reverted: {}\n\nFailed verdict:\n", candidate.change);
    for v in candidate
        .check
        .verdicts
        .iter()
        .filter(|v| v.state == State::Failed)
    {
        out.push_str(&format!(
            "- {} ({}) pinned {}: {}/{} pod(s) on it: {}\n",
            v.workload, v.container, v.pinned_digest, v.pods_on_pinned, v.pods_total, v.reason
        ));
    }
    out.push_str("\nRestored:\n");
    for m in moved {
        let from = m.from.as_ref().map(ToString::to_string).unwrap_or_default();
        out.push_str(&format!(
            "- {} ({}:{} {}/{}): {} -> {from}\n",
            m.repository,
            m.file.display(),
            m.line,
            m.workload,
            m.container,
            m.to
        ));
    }
    out
}

/// The plan block of a revert change request: each field back to its earlier digest, so the
/// revert is verified like any change once merged.
fn restore_block(target: &str, moved: &[Moved]) -> PlanBlock {
    let changes: Vec<Change> = moved
        .iter()
        .filter_map(|m| {
            Some(Change {
                file: m.file.clone(),
                line: m.line,
                workload: m.workload.clone(),
                container: m.container.clone(),
                image: crate::resolution::ResolveKey::of(&Reference::parse(&m.value).ok()?)
                    .to_string(),
                old_value: m.value.clone(),
                new_value: m.from_value.clone(),
                old_digest: Some(m.to.clone()),
                new_digest: m.from.clone()?,
                old_tag: None,
                new_tag: None,
                action: Action::Update,
                signature: None,
                provenance: None,
                age: None,
            })
        })
        .collect();
    PlanBlock::new(target, &changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::judge::verdict::Verdict;

    const D0: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn fields(text: &str) -> Vec<ImageField> {
        manifest::scan(Path::new("apps/web.yaml"), text.as_bytes())
            .unwrap()
            .fields
    }

    fn web(image: &str, side: &str) -> String {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: {image}\n      - name: side\n        image: {side}\n"
        )
    }

    fn moved(before: &str, after: &str) -> Result<Vec<Moved>, Refusal> {
        moved_fields(Path::new("apps/web.yaml"), &fields(before), &fields(after))
    }

    /// web's image pinned to `digest`.
    fn at(digest: &str) -> String {
        format!("ghcr.io/acme/web:1@{digest}")
    }

    /// The fields a commit moved that changed only web's image, from `before` to `after`.
    fn web_moved(before: &str, after: &str) -> Vec<Moved> {
        moved(&web(before, "busybox:1"), &web(after, "busybox:1")).unwrap()
    }

    #[test]
    fn the_fields_a_pin_moved_are_found_with_both_digests() {
        let found = web_moved(&at(D0), &at(D1));
        assert_eq!(found.len(), 1);
        let m = &found[0];
        assert_eq!((m.line, m.container.as_str()), (9, "web"));
        assert_eq!(m.repository, "ghcr.io/acme/web");
        assert_eq!(
            m.from.as_ref().map(ToString::to_string).as_deref(),
            Some(D0)
        );
        assert_eq!(m.to.to_string(), D1);
        assert_eq!(m.from_value, format!("ghcr.io/acme/web:1@{D0}"));
    }

    #[test]
    fn a_change_of_more_than_digests_is_a_person_s_and_refused() {
        let other_image = moved(
            &web(&format!("ghcr.io/acme/web:1@{D0}"), "busybox:1"),
            &web(&format!("ghcr.io/acme/api:1@{D1}"), "busybox:1"),
        );
        assert!(other_image
            .unwrap_err()
            .0
            .contains("moves more than digests"));
        let fewer = moved_fields(
            Path::new("apps/web.yaml"),
            &fields(&web("a:1", "b:1")),
            &fields(&web("a:1", "b:1"))[..1],
        );
        assert!(fewer
            .unwrap_err()
            .0
            .contains("adds or removes image fields"));
    }

    fn check(state: State, pinned: &str) -> Check {
        let verdict = Verdict {
            workload: "shop/Deployment/web".parse().unwrap(),
            container: "web".into(),
            pinned_digest: Digest::parse(pinned).unwrap(),
            pods_on_pinned: 0,
            pods_total: 1,
            stale_pods: Vec::new(),
            finished_pods: Vec::new(),
            restarts: 0,
            conditions: Vec::new(),
            state,
            reason: "ImagePullBackOff on web-1".into(),
        };
        Check {
            state,
            summary: String::new(),
            verdicts: vec![verdict],
            gitops: Default::default(),
        }
    }

    #[test]
    fn only_a_failure_about_what_the_change_pinned_and_still_pins_is_reverted() {
        let pin = web_moved(&at(D0), &at(D1));
        assert_eq!(decide(&pin, &check(State::Failed, D1), &[true]), Ok(()));
        let why = |r: Result<(), Refusal>| r.unwrap_err().0;
        assert!(why(decide(&pin, &check(State::Progressing, D1), &[true])).contains("progressing"));
        assert!(why(decide(&pin, &check(State::Unverified, D1), &[true])).contains("unverified"));
        assert!(why(decide(&pin, &check(State::Failed, D0), &[true])).contains("not about"));
        assert!(
            why(decide(&pin, &check(State::Failed, D1), &[false])).contains("a later commit moved")
        );
        let first = web_moved("ghcr.io/acme/web:1", &at(D1));
        assert!(
            why(decide(&first, &check(State::Failed, D1), &[true])).contains("no earlier digest")
        );
    }

    #[test]
    fn claims_are_read_from_trailers_and_malformed_lines_pass() {
        let message = format!(
            "Revert pin of 1 image(s): x\n\nTagpin-Reverts: 0123\nTagpin-Held: ghcr.io/acme/web@{D1}\nTagpin-Held: not a digest@sha256:zz\nTagpin-Held nothing\nTagpin-Held: acme/api@{D0}\n"
        );
        assert_eq!(
            claims(&message),
            vec![
                Claim {
                    repository: "ghcr.io/acme/web".into(),
                    digest: D1.parse().unwrap()
                },
                Claim {
                    repository: "docker.io/acme/api".into(),
                    digest: D0.parse().unwrap()
                },
            ]
        );
    }

    #[test]
    fn a_claim_holds_only_what_its_own_commit_moved_away_and_the_tip_still_restores() {
        // The revert moved web from D1 (failed) back to D0.
        let revert = web_moved(&at(D1), &at(D0));
        let claim = |repository: &str, digest: &str| Claim {
            repository: repository.into(),
            digest: digest.parse().unwrap(),
        };
        assert!(backing(&claim("ghcr.io/acme/web", D1), &revert, &[true]).is_some());
        // Another digest, another image, or a commit that moved nothing: words only.
        assert!(backing(&claim("ghcr.io/acme/web", D0), &revert, &[true]).is_none());
        assert!(backing(&claim("ghcr.io/acme/api", D1), &revert, &[true]).is_none());
        assert!(backing(&claim("ghcr.io/acme/web", D1), &[], &[]).is_none());
        // A later commit moved the field again: the hold has ended.
        assert!(backing(&claim("ghcr.io/acme/web", D1), &revert, &[false]).is_none());
    }
}
