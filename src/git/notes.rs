//! Git notes on `refs/notes/tagpin`: what tagpin records about a commit that Git itself does
//! not (the verdicts and their times, for the delivery report, `src/delivery/`). A note is a
//! blob attached to a commit on a ref of its own, so it never touches a branch: the branch's
//! history, its signatures and its protection stay as they are.
//!
//! The remote's notes ref is the record: [`Mirror::fetch_notes`] copies it into the mirror
//! (forced: the remote is the truth), [`Mirror::add_note`] builds one notes commit on what was
//! fetched and pushes it as a fast-forward only, so a writer that lost a race to another one
//! is refused, fetches again and retries once; a second loss is left to the next pass. Notes
//! commits are not signed (`author.signing` applies to the branch's commits only).

use git2::{Oid, Signature};

use super::{local_path, other, GitError, Mirror, MirrorLock, PUSH_REF};

/// The ref tagpin's notes live on, on the remote and in the mirror.
pub(crate) const NOTES_REF: &str = "refs/notes/tagpin";

/// How many times a note is written when another writer moved the notes ref in between.
const ATTEMPTS: usize = 2;

impl Mirror {
    /// Copies the remote's `refs/notes/tagpin` into the mirror; a remote without one leaves
    /// the mirror without one. When the last ref listing through this handle (the one a
    /// [`Mirror::fetch`] makes first) advertised the notes ref where the mirror has it, or this
    /// handle pushed the note since, nothing is fetched: at rest a cycle costs the remote one
    /// ref listing, not a listing and a notes fetch. The listing is used once.
    pub fn fetch_notes(&self) -> Result<(), GitError> {
        if self
            .advertised_notes
            .take()
            .is_some_and(|remote| remote == self.notes_tip())
        {
            return Ok(());
        }
        let _lock = MirrorLock::acquire(&self.lock_path)?;
        self.fetch_notes_locked()
    }

    /// Keeps where a ref listing of the remote (`heads`) says its notes ref is, for the next
    /// [`Mirror::fetch_notes`].
    pub(super) fn remember_notes_advertised(&self, heads: &[git2::RemoteHead<'_>]) {
        let notes = heads.iter().find(|h| h.name() == NOTES_REF);
        self.advertised_notes.set(Some(notes.map(|h| h.oid())));
    }

    fn fetch_notes_locked(&self) -> Result<(), GitError> {
        self.advertised_notes.set(None);
        self.count(|t| t.fetches += 1);
        let repo = self.repo();
        let mut remote = repo
            .remote_anonymous(&self.url)
            .map_err(|e| self.fetch_error(e))?;
        let attempts = std::cell::Cell::new(0);
        let mut options = git2::FetchOptions::new();
        options.remote_callbacks(self.callbacks(&attempts));
        let refspec = format!("+{NOTES_REF}:{NOTES_REF}");
        remote
            .fetch(&[refspec], Some(&mut options), None)
            .map_err(|e| self.fetch_error(e))?;
        let advertised = remote
            .list()
            .map(|heads| heads.iter().any(|h| h.name() == NOTES_REF))
            .unwrap_or(true);
        if !advertised {
            if let Ok(mut gone) = repo.find_reference(NOTES_REF) {
                let _ = gone.delete();
            }
        }
        Ok(())
    }

    /// The mirror's notes ref, as last fetched or written.
    pub(crate) fn notes_tip(&self) -> Option<Oid> {
        self.repo()
            .find_reference(NOTES_REF)
            .ok()
            .and_then(|r| r.target())
    }

    /// The note on `commit`, as the mirror has it.
    pub fn note(&self, commit: Oid) -> Option<String> {
        let repo = self.repo();
        let note = repo.find_note(Some(NOTES_REF), commit).ok()?;
        note.message().map(str::to_string)
    }

    /// Every note of the mirror's notes ref: annotated commit and text.
    pub fn notes(&self) -> Result<Vec<(Oid, String)>, GitError> {
        let repo = self.repo();
        let Ok(iter) = repo.notes(Some(NOTES_REF)) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for entry in iter {
            let (_, annotated) = entry.map_err(|e| self.read_error(e))?;
            if let Ok(note) = repo.find_note(Some(NOTES_REF), annotated) {
                out.extend(note.message().map(|m| (annotated, m.to_string())));
            }
        }
        Ok(out)
    }

    /// Sets the note on `commit` to what `edit` makes of the remote's current note (`None`
    /// when there is none), and pushes it; `edit` answering `None` leaves it as it is. Fetched
    /// first, and once more when another writer moved the ref in between.
    pub fn add_note(
        &self,
        commit: Oid,
        author: &crate::config::Author,
        edit: &dyn Fn(Option<&str>) -> Option<String>,
    ) -> Result<(), GitError> {
        let _lock = MirrorLock::acquire(&self.lock_path)?;
        let mut last = None;
        for _ in 0..ATTEMPTS {
            self.fetch_notes_locked()?;
            let before = self.notes_tip();
            let Some(text) = edit(self.note(commit).as_deref()) else {
                return Ok(());
            };
            let signature = Signature::now(&author.name, &author.email).map_err(other)?;
            self.repo()
                .note(&signature, &signature, Some(NOTES_REF), commit, &text, true)
                .map_err(|e| self.read_error(e))?;
            let Some(notes_commit) = self.notes_tip() else {
                return Err(GitError::Other("the note written left no notes ref".into()));
            };
            match self.push_notes(notes_commit, before) {
                Ok(()) => {
                    // The remote's notes ref is now where the mirror's is.
                    self.advertised_notes.set(Some(Some(notes_commit)));
                    return Ok(());
                }
                Err(e @ (GitError::NonFastForward { .. } | GitError::LeaseBroken { .. })) => {
                    last = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| GitError::Other("notes not written".into())))
    }

    /// Pushes the notes commit as a fast-forward of `before` (`None`: the remote had no notes
    /// ref).
    fn push_notes(&self, notes_commit: Oid, before: Option<Oid>) -> Result<(), GitError> {
        if let Some(path) = local_path(&self.url) {
            let target = git2::Repository::open(path).map_err(|e| self.push_error(e))?;
            self.copy_objects(&target, notes_commit)
                .map_err(|e| self.push_error(e))?;
            let moved = match before {
                Some(base) => {
                    target.reference_matching(NOTES_REF, notes_commit, true, base, "tagpin note")
                }
                None => target.reference(NOTES_REF, notes_commit, false, "tagpin note"),
            };
            return match moved {
                Ok(_) => Ok(()),
                Err(e) if super::is_stale(&e) => Err(GitError::NonFastForward {
                    url: self.display_url(),
                    branch: NOTES_REF.to_string(),
                }),
                Err(e) => Err(self.push_error(e)),
            };
        }
        let repo = self.repo();
        let mut remote = repo
            .remote_anonymous(&self.url)
            .map_err(|e| self.push_error(e))?;
        let refspec = format!("{PUSH_REF}:{NOTES_REF}");
        self.send(&mut remote, notes_commit, &refspec, NOTES_REF)
    }
}
