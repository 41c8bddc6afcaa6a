//! Reading a repository's delivery history from its mirror: the branch's first-parent commits
//! since the window's start, what each moved in which stage's paths (tagpin's pins, merges of
//! its change requests, promotions, reverts and holds), the verdicts noted on them
//! (`refs/notes/tagpin`), and each digest's build time (the registry, else its first
//! sighting, else the pin commit). The figures are made by [`super::figures`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::age::{self, seen::FirstSeen};
use crate::config::Config;
use crate::event::Event;
use crate::git::{off_runtime, GitError, Mirror};
use crate::manifest::ManifestError;
use crate::reference::{Digest, Reference, Subject};
use crate::registry::Client;
use crate::revert::{self, Moved};

use super::figures::{CreatedFrom, Image, Kind, Landed, Recorded};
use super::note;
use super::report::{self, DeliveryReport};

/// The most commits of the branch read back: a window of a busy repository still ends.
pub const MAX_COMMITS: usize = 5_000;
/// The most files a commit may change to be read as a deployment (as for holds).
const MAX_FILES: usize = revert::HELD_MAX_FILES;
/// How long the registry is given to say when one digest was built.
const BUILD_TIME_BUDGET: Duration = Duration::from_secs(10);

/// The report and the events of one repository's history.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub report: DeliveryReport,
    /// Oldest first (the dashboard's timeline).
    pub events: Vec<Event>,
}

/// Why the history could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("helm options: {0}")]
    Helm(#[from] ManifestError),
}

/// The stages whose paths a commit is sorted into, in order: the promotion stages, or the
/// branch's name with the configured paths.
pub fn stages(config: &Config) -> Vec<(String, Vec<String>)> {
    match &config.promotion {
        Some(promotion) => promotion
            .stages
            .iter()
            .map(|s| (s.name.clone(), s.paths.clone()))
            .collect(),
        None => vec![(config.repository.branch.clone(), config.paths.clone())],
    }
}

/// The stage name a verdict of the round is recorded under: the promotion's stage, else the
/// first stage, else the branch's name.
pub fn stage_name(config: &Config, stage: Option<&str>) -> String {
    stage
        .map(str::to_string)
        .or_else(|| stages(config).into_iter().next().map(|(name, _)| name))
        .unwrap_or_else(|| config.repository.branch.clone())
}

fn under(path: &str, configured: &str) -> bool {
    let prefix = configured.trim_start_matches("./").trim_end_matches('/');
    prefix.is_empty()
        || prefix == "."
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|r| r.starts_with('/'))
}

/// Fetches the remote's verdict notes into `mirror` (only when the last ref listing showed them
/// moved: [`Mirror::fetch_notes`]); when they cannot be, what the mirror has is read (logged).
pub fn fetch_notes(mirror: &Mirror) {
    if let Err(e) = off_runtime(|| mirror.fetch_notes()) {
        tracing::warn!(
            "verdict notes ({}) not fetched: {e}",
            crate::git::notes::NOTES_REF
        );
    }
}

/// Reads the delivery history of `config`'s branch from `mirror` (its branch and notes
/// fetched by the caller: [`Mirror::fetch`], [`fetch_notes`]) and makes the report of
/// deployments since `since` and the events. `registry`: where build times are asked;
/// without one, first sightings and commit times are used. `repository` names the
/// repository in the events.
pub async fn read(
    mirror: &Mirror,
    config: &Config,
    registry: Option<&Client>,
    repository: &str,
    (since, now): (i64, i64),
) -> Result<Delivery, ReadError> {
    let helm = config.helm.options()?;
    let stages = stages(config);
    let (mut landed, recorded) = off_runtime(|| walk(mirror, config, &stages, &helm, since))?;
    // The registry is asked only for what has a lead time: converged deployments.
    let converged: BTreeSet<(String, String)> = super::figures::deployments(&landed, &recorded)
        .iter()
        .filter(|d| d.converged.is_some())
        .map(|d| (d.landed.commit.clone(), d.landed.stage.clone()))
        .collect();
    date(&mut landed, mirror, (registry, &converged), now).await;
    let names: Vec<String> = stages.iter().map(|(n, _)| n.clone()).collect();
    let report = report::build(&names, &landed, &recorded, since);
    let first = names.first().cloned().unwrap_or_default();
    let events = report::events(repository, &first, &landed, &recorded);
    Ok(Delivery { report, events })
}

/// The commits of the window, oldest first, sorted into stages, and the verdicts noted on
/// them. The images' build times are left at the commit's time, for [`date`].
fn walk(
    mirror: &Mirror,
    config: &Config,
    stages: &[(String, Vec<String>)],
    helm: &crate::manifest::HelmOptions,
    since: i64,
) -> Result<(Vec<Landed>, Vec<Recorded>), GitError> {
    let tip = mirror.require_tip(&config.repository.branch)?;
    let mut commits = Vec::new();
    for commit in mirror.first_parents(tip, MAX_COMMITS)? {
        let time = mirror.commit_time(commit)?;
        commits.push((commit, time));
        if time < since {
            break;
        }
    }
    commits.reverse();
    let mut landed = Vec::new();
    let mut recorded = Vec::new();
    for (position, (commit, time)) in commits.into_iter().enumerate() {
        recorded.extend(noted(mirror, commit, position));
        let Some(kind) = kind_of(mirror, commit)? else {
            continue;
        };
        let message = mirror.messages(commit, 1)?.pop().map(|(_, m)| m);
        let held: Vec<(String, String)> = revert::claims(message.as_deref().unwrap_or(""))
            .into_iter()
            .map(|c| (c.repository, c.digest.to_string()))
            .collect();
        let moved = revert::moved_by(mirror, commit, helm, MAX_FILES)?;
        for (stage, paths) in stages {
            let images = images_in(&moved, paths, time);
            if images.is_empty() {
                continue;
            }
            landed.push(Landed {
                commit: commit.to_string(),
                position,
                time,
                stage: stage.clone(),
                kind: kind.clone(),
                images,
                held: held.clone(),
            });
        }
    }
    Ok((landed, recorded))
}

/// Whether a commit is a deployment (tagpin's own commit, or the merge of one) or a revert
/// (`Tagpin-Reverts`); `None` for anything else (a person's commit).
fn kind_of(mirror: &Mirror, commit: git2::Oid) -> Result<Option<Kind>, GitError> {
    let message = mirror.messages(commit, 1)?.pop().map(|(_, m)| m);
    let message = message.unwrap_or_default();
    let reverts = message.lines().find_map(|line| {
        let value = line
            .strip_prefix(revert::REVERTS_TRAILER)?
            .strip_prefix(':')?;
        Some(value.trim().to_string())
    });
    let parents = mirror.parents(commit)?;
    let own = mirror.is_own_commit(commit)?
        || parents.iter().skip(1).try_fold(false, |found, p| {
            Ok::<_, GitError>(found || mirror.is_own_commit(*p)?)
        })?;
    Ok(match (reverts, own) {
        (Some(reverts), _) => Some(Kind::Revert {
            reverts: Some(reverts),
        }),
        (None, true) => Some(Kind::Deployment),
        (None, false) => None,
    })
}

/// The verdicts noted on `commit`.
fn noted(mirror: &Mirror, commit: git2::Oid, position: usize) -> Vec<Recorded> {
    let Some(note) = mirror.note(commit).as_deref().and_then(note::parse) else {
        return Vec::new();
    };
    note.verdicts
        .into_iter()
        .map(|v| Recorded {
            commit: commit.to_string(),
            position,
            stage: v.stage,
            verdict: v.verdict,
            at: v.at,
        })
        .collect()
}

/// The images `moved` moved to a digest in `paths`, one per image and digest.
fn images_in(moved: &[Moved], paths: &[String], time: i64) -> Vec<Image> {
    let mut images: BTreeMap<(String, String), ()> = BTreeMap::new();
    for m in moved {
        let path = m.file.to_string_lossy();
        if paths.iter().any(|p| under(&path, p)) && m.from.as_ref() != Some(&m.to) {
            images.insert((m.repository.clone(), m.to.to_string()), ());
        }
    }
    images
        .into_keys()
        .map(|(image, digest)| Image {
            image,
            digest,
            created: (time, CreatedFrom::Commit),
        })
        .collect()
}

/// Each image's build time: the registry's (`created`, the annotation; asked only for
/// converged deployments, the only ones with a lead time), else when tagpin first resolved a
/// tag to it, else the commit's time (left as it is).
async fn date(
    landed: &mut [Landed],
    mirror: &Mirror,
    (registry, converged): (Option<&Client>, &BTreeSet<(String, String)>),
    now: i64,
) {
    // One reader at a time (the operator's objects end their cycles together): a digest's
    // build time is asked of the registry once per process, then read from age's memory.
    static ASKING: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    let _one_at_a_time = ASKING.get_or_init(Default::default).lock().await;
    let seen = FirstSeen::in_dir(mirror.cache_dir());
    type Key = (String, String, bool);
    let mut known: BTreeMap<Key, Option<(i64, CreatedFrom)>> = BTreeMap::new();
    for l in landed.iter_mut().filter(|l| l.kind == Kind::Deployment) {
        let ask = converged
            .contains(&(l.commit.clone(), l.stage.clone()))
            .then_some(registry)
            .flatten();
        for image in &mut l.images {
            let key = (image.image.clone(), image.digest.clone(), ask.is_some());
            if !known.contains_key(&key) {
                let found = built(ask, &seen, &image.image, &image.digest, now).await;
                known.insert(key.clone(), found);
            }
            if let Some(Some(created)) = known.get(&key) {
                image.created = *created;
            }
        }
    }
}

async fn built(
    registry: Option<&Client>,
    seen: &FirstSeen,
    image: &str,
    digest: &str,
    now: i64,
) -> Option<(i64, CreatedFrom)> {
    let reference = Reference::parse(image).ok()?;
    let digest = Digest::parse(digest).ok()?;
    if let Some(client) = registry {
        if let Some(born) =
            age::fetch::born(client, &reference, &digest, BUILD_TIME_BUDGET, now).await
        {
            let from = match born.source {
                age::Source::Created => CreatedFrom::Created,
                age::Source::Annotation => CreatedFrom::Annotation,
                age::Source::FirstSeen => CreatedFrom::FirstSeen,
            };
            return Some((born.at, from));
        }
    }
    seen.get(&Subject::of(&reference, &digest))
        .map(|at| (at, CreatedFrom::FirstSeen))
}
