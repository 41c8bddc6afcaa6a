//! One pass over a working tree of manifests: gather, scan, resolve, plan; then, for `pin`,
//! write.
//!
//! This is the I/O shell around the pure planner; the gathering and scanning are the shared
//! [`crate::pipeline`]. Per-file problems (unreadable, not YAML, too large) are collected and
//! the pass goes on, the way ripgrep reports a bad file and keeps searching: one broken
//! manifest never blocks the pins of all the others.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::manifest::{self, FileFilter, ManifestError};
use crate::pipeline::{self, ImageSelection, Skipped, WithoutImages};
use crate::plan::{self, FilePlan, Plan};
use crate::policy::Follow;
use crate::registry::Client;
use crate::resolution::{ResolveKey, ResolveResult};

/// The outcome of one pass.
#[derive(Debug, Default)]
pub struct Pass {
    pub plan: Plan,
    /// Files that could not be listed, read or scanned, with file and line.
    pub file_errors: Vec<ManifestError>,
    /// What was passed over on purpose, and why: symlinks, files that are not Kubernetes
    /// manifests, image fields tagpin cannot edit safely.
    pub skipped: Vec<Skipped>,
    /// Image references found, by the kind of object holding them (`Deployment`, `Rollout`,
    /// `CloneSet.apps.kruise.io`, `Helm values`): what was read.
    pub kinds: BTreeMap<String, usize>,
    /// Manifests read that hold no image at all, with what they hold.
    pub without_images: Vec<WithoutImages>,
}

impl Pass {
    /// Every failure of the pass, files first, then fields, as messages naming file and line.
    pub fn failures(&self) -> Vec<String> {
        self.file_errors
            .iter()
            .map(ToString::to_string)
            .chain(self.plan.problems.iter().map(ToString::to_string))
            .collect()
    }

    pub fn has_failures(&self) -> bool {
        !self.file_errors.is_empty() || !self.plan.problems.is_empty()
    }
}

/// How many registry answers the planning thread is handed at a time. Handed over one by one,
/// 500 answers woke it 500 times (a futex wake and a context switch each, on cores the
/// registry needs); batching them, and handing each distinct image to the resolver once
/// instead of once per field, took about 18 ms of CPU off a 500-image pass (`bench_plan`).
/// What is left to plan after the last answer is the few files waiting on the last batch.
const ANSWER_BATCH: usize = 16;

/// How many images the scanning thread hands the registry client at a time, once the first
/// [`UNBATCHED_IMAGES`] have gone one by one. The scan runs far ahead of the registry, so the
/// client always has work queued; handed over one by one, each image was a wake-up of the
/// runtime's thread (an eventfd write and a context switch).
const FOUND_BATCH: usize = 16;

/// The first images found are handed over at once, one by one, so that the first requests
/// leave while the first files are read: as many as the client sends to one registry at once.
const UNBATCHED_IMAGES: usize = crate::registry::DEFAULT_CONCURRENCY_PER_HOST;

/// Scans `paths`, resolves every distinct image once, and plans. Writes nothing.
///
/// The files are read and scanned, one after the other, on a blocking thread that hands the
/// images over as it goes (the first `UNBATCHED_IMAGES` at once, then `FOUND_BATCH` at a
/// time), and the registry is asked for them at once: the first request leaves after one file
/// is read, not all of them, and the reading and scanning hide behind the registry's answers
/// instead of coming before them. The same thread then plans each file (rewrite and diff) as
/// soon as its images are answered ([`plan::Planner`]), so what is left after the last answer
/// is the few files that waited on it.
pub async fn run(paths: &[PathBuf], filter: &FileFilter, client: &Client) -> Pass {
    let started = Instant::now();
    let (found, references) = tokio::sync::mpsc::unbounded_channel();
    let (answered, answers) = std::sync::mpsc::channel::<Vec<(ResolveKey, ResolveResult)>>();
    let (paths, filter) = (paths.to_vec(), filter.clone());
    // How many images the scan handed over, once it is done (`usize::MAX` until then).
    let images = std::sync::Arc::new(AtomicUsize::new(usize::MAX));
    let images_found = images.clone();
    let (done, planned) = tokio::sync::oneshot::channel();
    let scanning_and_planning = tokio::task::spawn_blocking(move || {
        // `plan` and `pin` read no configuration, so every tag stays as written.
        let follow = Follow::default();
        let mut first = true;
        // Most images are named in several files: each value is handed over once, so the
        // registry client is woken once per distinct image, not once per field.
        let mut seen: HashSet<String> = HashSet::new();
        let (mut batch, mut handed) = (Vec::new(), 0);
        let scanned =
            pipeline::scan_working_tree_with(&paths, &filter, &ImageSelection::default(), |file| {
                if std::mem::take(&mut first) {
                    tracing::debug!(phase = "first image", elapsed = ?started.elapsed());
                }
                for field in &file.fields {
                    if seen.contains(&field.value) {
                        continue;
                    }
                    seen.insert(field.value.clone());
                    if let Some(reference) = plan::reference_to_resolve(&field.value, &follow) {
                        batch.push(reference);
                    }
                }
                if !batch.is_empty() && (handed < UNBATCHED_IMAGES || batch.len() >= FOUND_BATCH) {
                    handed += batch.len();
                    // The receiver lives until the sender is dropped, after the scan.
                    let _ = found.send(std::mem::take(&mut batch));
                }
            });
        // Every image is asked: the registry client may finish once its answers are in.
        if !batch.is_empty() {
            handed += batch.len();
            let _ = found.send(batch);
        }
        images_found.store(handed, Ordering::Relaxed);
        drop(found);
        tracing::debug!(phase = "scanned", files = scanned.files.len(), elapsed = ?started.elapsed());
        let mut planner = plan::Planner::new(&scanned.files, &follow);
        // Ends when the client has handed over its last answers and dropped the sender.
        for batch in answers {
            for (key, result) in batch {
                planner.answer(key, result);
            }
        }
        let mut plan = planner.finish();
        // Every file read counts, with images or without.
        plan.summary.files_scanned = scanned.files_read;
        let kinds = scanned.kinds();
        // The pass goes out first, and the scanned files (every file's text and tree) are
        // freed here after it, beside the printing of the report instead of before it.
        let _ = done.send(Pass {
            plan,
            file_errors: scanned.errors,
            skipped: scanned.skipped,
            kinds,
            without_images: scanned.without_images,
        });
    });
    let mut batch = Vec::with_capacity(ANSWER_BATCH);
    let mut answered_so_far = 0;
    client
        .resolve_as_found(references, |key, result| {
            batch.push((key.clone(), result.clone()));
            answered_so_far += 1;
            // The last answers go over one by one, so the files waiting on them are planned
            // while the last requests are still out, not after.
            let total = images.load(Ordering::Relaxed);
            let last_ones = total != usize::MAX && answered_so_far + ANSWER_BATCH > total;
            if batch.len() == ANSWER_BATCH || last_ones {
                // Fails only if the planning thread is gone (it panicked), reported below.
                let _ = answered.send(std::mem::replace(
                    &mut batch,
                    Vec::with_capacity(ANSWER_BATCH),
                ));
            }
        })
        .await;
    let _ = answered.send(batch);
    drop(answered);
    tracing::debug!(phase = "resolved", elapsed = ?started.elapsed());
    let pass = match planned.await {
        Ok(pass) => pass,
        // The thread ended without a pass: it panicked, or was cancelled (only when the
        // runtime shuts down, and then nothing reads the pass).
        Err(_) => match scanning_and_planning.await {
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            _ => Pass::default(),
        },
    };
    tracing::debug!(phase = "planned", elapsed = ?started.elapsed());
    pass
}

/// The image gates a configuration sets, compiled: `images.signatures`, `images.minimum_age`
/// and `images.provenance`. `sync`, `promote` and `pin`/`plan --config` compile them here,
/// so all three take and refuse the same entries with the same message.
#[derive(Debug, Clone, Default)]
pub(crate) struct ImageGates {
    pub signatures: crate::signature::Signatures,
    pub ages: crate::age::MinimumAges,
    pub provenance: crate::provenance::ProvenanceRules,
}

/// An image gate entry that does not compile. A configuration loaded from a file was
/// validated already; this is for one built otherwise (an operator object's spec, a test).
#[derive(Debug, thiserror::Error)]
pub enum GateRuleError {
    #[error("configuration: {0}")]
    Signature(#[from] crate::signature::SignatureError),
    #[error("configuration: {0}")]
    MinimumAge(#[from] crate::age::AgeRuleError),
    #[error("configuration: {0}")]
    Provenance(#[from] crate::provenance::ProvenanceError),
}

impl ImageGates {
    pub(crate) fn compile(config: &crate::config::Config) -> Result<ImageGates, GateRuleError> {
        Ok(ImageGates {
            signatures: crate::signature::Signatures::compile(&config.images.signatures)?,
            ages: crate::age::MinimumAges::compile(config.minimum_ages())?,
            provenance: crate::provenance::ProvenanceRules::compile(&config.images.provenance)?,
        })
    }
}

/// What `pin` and `plan` check signatures, provenance and ages against, from `--config`'s
/// `images.signatures`, `images.provenance` and `images.minimum_age`; the default checks none.
#[derive(Debug, Clone, Default)]
pub struct Signed {
    pub rules: crate::signature::Signatures,
    /// Each signature or age lookup's budget (`registries.budget_seconds`).
    pub budget: std::time::Duration,
    /// `images.minimum_age`: a digest younger than its entry's age is held.
    pub ages: crate::age::MinimumAges,
    /// `images.provenance`: a digest is pinned only with accepted build provenance.
    pub provenance: crate::provenance::ProvenanceRules,
    /// Where a digest whose registry gives no build time is remembered from its first sighting.
    pub first_seen: crate::age::seen::FirstSeen,
}

/// [`run`], where digests of images `signed.rules` matches are pinned only signed, and digests
/// of images `signed.ages` matches only once old enough, and of images `signed.provenance`
/// matches only with accepted build provenance; with `check_pins` (`pin --check`),
/// every digest already pinned of an image that must be signed or attested is checked too,
/// and one not signed (or without accepted provenance) is a failure naming file and line. Signatures and ages are checked before planning, so this
/// pass scans and resolves everything first instead of planning file by file as answers
/// arrive.
pub async fn run_signed(
    paths: &[PathBuf],
    filter: &FileFilter,
    client: &Client,
    signed: &Signed,
    check_pins: bool,
) -> Pass {
    if signed.rules.is_empty() && signed.ages.is_empty() && signed.provenance.is_empty() {
        return run(paths, filter, client).await;
    }
    let (paths, filter) = (paths.to_vec(), filter.clone());
    let scanning = tokio::task::spawn_blocking(move || {
        pipeline::scan_working_tree_with(&paths, &filter, &ImageSelection::default(), |_| {})
    });
    let scanned = match scanning.await {
        Ok(scanned) => scanned,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => return Pass::default(),
    };
    let mut follow = Follow {
        signatures: crate::signature::Verdicts::new(signed.rules.clone()),
        provenance: crate::provenance::Verdicts::new(signed.provenance.clone()),
        ages: crate::age::Ages::new(signed.ages.clone(), crate::clock::unix_now()),
        ..Follow::default()
    };
    let references: Vec<_> = scanned
        .fields()
        .filter_map(|field| plan::reference_to_resolve(&field.value, &follow))
        .collect();
    // Each distinct image is asked once.
    let resolutions = client.resolve_all(&references).await;
    let mut unchecked = plan::signatures_to_check(&scanned.files, &resolutions, &follow);
    if check_pins {
        unchecked.extend(plan::pins_to_check(&scanned.files, &follow));
    }
    crate::signature::fetch::check_all(client, &mut follow.signatures, unchecked, signed.budget)
        .await;
    let mut unattested = plan::provenance_to_check(&scanned.files, &resolutions, &follow);
    if check_pins {
        unattested.extend(plan::provenance_pins_to_check(&scanned.files, &follow));
    }
    crate::provenance::fetch::check_all(client, &mut follow.provenance, unattested, signed.budget)
        .await;
    let ages = plan::ages_to_check(&scanned.files, &resolutions, &follow);
    crate::age::fetch::check_all(
        client,
        &mut follow.ages,
        ages,
        &signed.first_seen,
        signed.budget,
    )
    .await;
    let mut plan = plan::plan(&scanned.files, &resolutions, &follow);
    if check_pins {
        let unsigned = plan::unsigned_pins(&scanned.files, &follow);
        plan.summary.failed += unsigned.len();
        plan.problems.extend(unsigned);
    }
    plan.summary.files_scanned = scanned.files_read;
    Pass {
        plan,
        kinds: scanned.kinds(),
        file_errors: scanned.errors,
        skipped: scanned.skipped,
        without_images: scanned.without_images,
    }
}

/// What happened to one planned file on `pin`.
#[derive(Debug)]
pub struct WriteOutcome {
    pub path: PathBuf,
    pub result: Result<(), WriteError>,
}

/// Why a planned file was not written. The caller names the file ([`WriteOutcome::path`]);
/// these say only what went wrong.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// It grew past the size the scanner reads since it was planned, and was not read whole.
    #[error("it is now {size} bytes, larger than the {limit}-byte limit")]
    Grew { size: u64, limit: u64 },
    #[error("{0}")]
    Read(#[source] std::io::Error),
    /// Read again, it is not what was planned (see [`ManifestError`] for the other reasons).
    #[error(transparent)]
    Reread(ManifestError),
    /// Its edit spans were computed for the bytes read when planning.
    #[error("the file changed while tagpin was planning; run again")]
    Changed,
    #[error("{0}")]
    Write(#[source] std::io::Error),
}

/// Writes every planned file atomically. A file that changed on disk since it was read is
/// not overwritten: its edit spans were computed for the old bytes.
pub fn write(plan: &Plan) -> Vec<WriteOutcome> {
    plan.files
        .iter()
        .map(|file| WriteOutcome {
            path: file.path.clone(),
            result: write_one(file),
        })
        .collect()
}

fn write_one(file: &FilePlan) -> Result<(), WriteError> {
    // Read within the size limit like the first time: a file that grew since is not read whole.
    let current = manifest::read_manifest(&file.path).map_err(|e| match e {
        ManifestError::TooLarge { size, limit, .. } => WriteError::Grew { size, limit },
        ManifestError::Io { source, .. } => WriteError::Read(source),
        other => WriteError::Reread(other),
    })?;
    if current != file.original {
        return Err(WriteError::Changed);
    }
    manifest::write_atomic(Path::new(&file.path), &file.updated).map_err(WriteError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_grew_past_the_limit_since_planning_is_not_read_whole_nor_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yaml");
        let file = std::fs::File::create(&path).unwrap();
        // Sparse: 17 MiB on paper, nothing on disk.
        file.set_len(manifest::MAX_FILE_BYTES + 1024 * 1024)
            .unwrap();
        let plan = FilePlan {
            path: path.clone(),
            original: b"image: a:1\n".to_vec(),
            updated: b"image: a:1@sha256:0\n".to_vec(),
            diff: String::new(),
        };

        let error = write_one(&plan).unwrap_err().to_string();

        assert!(
            error.contains("larger than the 16777216-byte limit"),
            "{error}"
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            manifest::MAX_FILE_BYTES + 1024 * 1024,
            "left as it was"
        );
    }
}
