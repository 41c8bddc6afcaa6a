//! Recording a final verdict where the delivery report reads it back: a note on the
//! deployment commit verified (`refs/notes/tagpin`, see [`super::note`]), pushed as a
//! fast-forward of the remote's notes ref and never onto a branch. A lost race is retried
//! once ([`Mirror::add_note`]); a note that still could not be written is logged and
//! written by a later round (a Converged stage is judged again every interval).

use git2::Oid;

use crate::config::Config;
use crate::git::{off_runtime, GitError, Mirror};
use crate::verify::judge::check::{Check, Expectations};
use crate::verify::judge::verdict::State;

use super::figures::Verdict;
use super::note::{self, NotedImage, NotedVerdict};

/// What one verdict to record is about.
pub struct Verdicted<'a> {
    /// The commit verified: the tip, or a change request's merge commit.
    pub commit: &'a str,
    /// The stage's name ([`super::history::stage_name`]).
    pub stage: String,
    pub expectations: &'a Expectations,
    pub check: &'a Check,
    /// Unix seconds.
    pub at: i64,
}

/// The verdict a check's state is recorded as: only final ones are.
pub fn verdict_of(state: State) -> Option<Verdict> {
    match state {
        State::Converged => Some(Verdict::Converged),
        State::Failed => Some(Verdict::Failed),
        _ => None,
    }
}

/// Notes `verdicted` on its commit unless its stage's last verdict there is the same.
pub fn record(mirror: &Mirror, config: &Config, verdicted: &Verdicted<'_>) -> Result<(), GitError> {
    let Some(verdict) = verdict_of(verdicted.check.state) else {
        return Ok(());
    };
    let Ok(commit) = Oid::from_str(verdicted.commit) else {
        return Ok(());
    };
    let mut images: Vec<NotedImage> = verdicted
        .expectations
        .expected
        .iter()
        .map(|e| NotedImage {
            image: e
                .pinned_ref
                .split_once('@')
                .map_or(e.pinned_ref.as_str(), |(name, _)| name)
                .to_string(),
            digest: e.digest.to_string(),
        })
        .collect();
    images.sort_by(|a, b| (&a.image, &a.digest).cmp(&(&b.image, &b.digest)));
    images.dedup();
    let noted = NotedVerdict {
        stage: verdicted.stage.clone(),
        verdict,
        time: crate::age::rfc3339(verdicted.at),
        at: verdicted.at,
        images,
    };
    off_runtime(|| {
        mirror.add_note(commit, &config.author, &|existing| {
            note::append(existing, noted.clone())
        })
    })
}
