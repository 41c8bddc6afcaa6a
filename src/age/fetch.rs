//! Asking the registry when a digest was built, through tagpin's own client: the manifest (or
//! index, then its platform manifest) for its `org.opencontainers.image.created` annotation
//! and its config blob for `created`. Every request is bounded in size and time like a
//! manifest request, its bytes checked against the digest asked for, and counted; what a
//! digest says is remembered while the process lives (a digest's bytes never change).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;

use super::created::{self, ManifestTimes};
use super::seen::FirstSeen;
use super::{Ages, Born, CheckCounts, Source, Subject};
use crate::reference::{Digest, Reference};
use crate::registry::media::ManifestParseError;
use crate::registry::{Client, Lookup, RegistryError, Stored};

/// Why the registry's times for a digest could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LookupError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Manifest(#[from] ManifestParseError),
}

/// How many digests are looked up at once; the client's per-host limit applies below this.
const CONCURRENT_LOOKUPS: usize = 16;

/// How many digests' times are remembered; past it the memory starts over.
const MAX_REMEMBERED: usize = 50_000;

/// The times the registry gives for a digest, as written, each with where it was read.
type Times = Vec<(Source, String)>;

/// What the registry said of each digest looked up (by image and digest): the times it gives,
/// as written, with where each was read. Process-wide, as the controller builds a new syncer
/// for every pass; lookups that failed are not remembered.
fn remembered() -> &'static Mutex<HashMap<Subject, Times>> {
    static TIMES: OnceLock<Mutex<HashMap<Subject, Times>>> = OnceLock::new();
    TIMES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Looks up when each digest of `wanted` was built (see [`crate::plan::ages_to_check`]),
/// falling back to its first sighting in `seen` when the registry gives no usable time, and
/// records each birth in `ages`; each lookup gets at most `budget`. Returns what was counted.
pub(crate) async fn check_all(
    client: &Client,
    ages: &mut Ages,
    wanted: BTreeMap<Subject, (Reference, Digest)>,
    seen: &FirstSeen,
    budget: Duration,
) -> CheckCounts {
    let now = ages.now;
    let looked_up: Vec<(Subject, Reference, Digest, Option<Born>)> =
        futures::stream::iter(wanted.into_iter().map(
            |(subject, (reference, digest))| async move {
                let born = born(client, &reference, &digest, budget, now).await;
                (subject, reference, digest, born)
            },
        ))
        .buffer_unordered(CONCURRENT_LOOKUPS)
        .collect()
        .await;
    let unknown: Vec<Subject> = looked_up
        .iter()
        .filter(|(.., born)| born.is_none())
        .map(|(subject, ..)| subject.clone())
        .collect();
    let first_seen = if unknown.is_empty() {
        BTreeMap::new()
    } else {
        let seen = seen.clone();
        let recording = tokio::task::spawn_blocking(move || seen.record(&unknown, now));
        match recording.await {
            Ok(first_seen) => first_seen,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => BTreeMap::new(),
        }
    };
    let mut counts = CheckCounts::new();
    for (subject, reference, digest, born) in looked_up {
        let born = born.unwrap_or(Born {
            at: first_seen.get(&subject).copied().unwrap_or(now),
            source: Source::FirstSeen,
        });
        ages.born.insert(subject.clone(), born);
        let Some(minimum) = ages.rules.for_image(&reference) else {
            continue;
        };
        let decision = super::decide(minimum, born, now);
        *counts
            .entry((decision.label(), born.source.label()))
            .or_insert(0) += 1;
        if decision.eligible() {
            tracing::debug!(image = %subject.image, %digest, age = decision.age, "old enough to pin");
        } else {
            tracing::info!(image = %subject.image, %digest, "not pinned yet: {}", decision.reason());
        }
    }
    counts
}

/// When `digest` of `reference`'s repository was built, as the registry says; `None` when it
/// does not say (or not credibly, or not within `budget`), each reason logged.
pub(crate) async fn born(
    client: &Client,
    reference: &Reference,
    digest: &Digest,
    budget: Duration,
    now: i64,
) -> Option<Born> {
    let subject = Subject::of(reference, digest);
    let known = remembered()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&subject)
        .cloned();
    let times = match known {
        Some(times) => times,
        None => match tokio::time::timeout(budget, times(client, reference, digest)).await {
            Ok(Ok(times)) => {
                let mut memory = remembered().lock().unwrap_or_else(|p| p.into_inner());
                if memory.len() >= MAX_REMEMBERED {
                    memory.clear();
                }
                memory.insert(subject.clone(), times.clone());
                times
            }
            Ok(Err(why)) => {
                tracing::warn!(image = %subject.image, %digest, "build time not read, counting from the first sighting: {why}");
                return None;
            }
            Err(_) => {
                tracing::warn!(image = %subject.image, %digest, "build time not read within {}s, counting from the first sighting", budget.as_secs());
                return None;
            }
        },
    };
    let (born, problems) = created::latest(&times, now);
    for problem in problems {
        tracing::info!(image = %subject.image, %digest, "build time not used: {problem}");
    }
    born
}

/// The times the registry gives for `digest`: its annotation, and for an index its platform
/// manifest's; the config's `created`. Each as written, with where it was read.
async fn times(
    client: &Client,
    reference: &Reference,
    digest: &Digest,
) -> Result<Times, LookupError> {
    let mut found = Vec::new();
    let mut manifest = read(client, reference, digest).await?;
    found.extend(manifest.annotation.take().map(|a| (Source::Annotation, a)));
    if let Some(child) = manifest.child.take() {
        manifest = read(client, reference, &child).await?;
        found.extend(manifest.annotation.take().map(|a| (Source::Annotation, a)));
    }
    if let Some(config) = &manifest.config {
        let bytes = client
            .bytes(reference, config, Stored::Blob, Lookup::Age)
            .await?;
        found.extend(created::config_created(&bytes).map(|c| (Source::Created, c)));
    }
    Ok(found)
}

async fn read(
    client: &Client,
    reference: &Reference,
    digest: &Digest,
) -> Result<ManifestTimes, LookupError> {
    let bytes = client
        .bytes(reference, digest, Stored::Manifest, Lookup::Age)
        .await?;
    Ok(created::read_manifest(&bytes)?)
}
