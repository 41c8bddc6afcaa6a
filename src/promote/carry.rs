//! Which digests a promotion carries and where they land, as pure functions.
//!
//! The source stage's manifests say which digest of each repository converged there (a
//! container `image:` with a digest, or a kustomize `images:` entry's `newTag` and `digest`).
//! Each reference of the target stage to the same repository, matched on the normalized name
//! after kustomize's `newName` mapping, is rewritten to the same tag text and digest, through
//! the same planner `sync` uses, so the edit is byte-exact. Nothing is asked of the registry.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::age::Ages;
use crate::manifest::{ImageField, Origin};
use crate::plan::{self, Plan, ScannedFile, Wanted};
use crate::policy::Holds;
use crate::reference::{Digest, Reference};

/// A tag and digest the source stage pins for one repository.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Carried {
    /// The tag as written there (`None` for a digest-only reference).
    pub tag: Option<String>,
    pub digest: Digest,
}

/// What the source stage pins, by normalized repository name (`ghcr.io/acme/web`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourcePins {
    pinned: BTreeMap<String, Vec<Carried>>,
    /// Repositories the source refers to without a digest, with the tags written there:
    /// nothing proven to carry, and a version a pinned one must not be mistaken for.
    unpinned: BTreeMap<String, BTreeSet<Option<String>>>,
}

impl SourcePins {
    /// Reads the pins out of the source stage's scanned files.
    pub fn from_files(files: &[ScannedFile]) -> SourcePins {
        let mut pins = SourcePins::default();
        for field in files.iter().flat_map(|f| &f.fields) {
            let Some((reference, digest)) = pinned(field) else {
                continue;
            };
            let name = reference.canonical_name();
            match digest {
                Some(digest) => {
                    let carried = Carried {
                        tag: reference.tag().map(str::to_string),
                        digest,
                    };
                    let list = pins.pinned.entry(name).or_default();
                    if !list.contains(&carried) {
                        list.push(carried);
                        list.sort();
                    }
                }
                None => {
                    pins.unpinned
                        .entry(name)
                        .or_default()
                        .insert(reference.tag().map(str::to_string));
                }
            }
        }
        pins
    }

    pub fn is_empty(&self) -> bool {
        self.pinned.is_empty()
    }

    /// How many repositories the source pins.
    pub fn len(&self) -> usize {
        self.pinned.len()
    }

    /// A short hash of every (repository, tag, digest) pinned: the soak clock belongs to
    /// exactly this set of digests.
    pub fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        for (name, carried) in &self.pinned {
            for c in carried {
                hasher.update(format!(
                    "{name} {} {}\n",
                    c.tag.as_deref().unwrap_or(""),
                    c.digest
                ));
            }
        }
        let hex: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        hex[..12].to_string()
    }

    /// Where a target reference should point, or why it stays as it is.
    fn decide(&self, target: &Reference) -> Result<Carried, SkipWhy> {
        let name = target.canonical_name();
        let Some(carried) = self.pinned.get(&name) else {
            return Err(if self.unpinned.contains_key(&name) {
                SkipWhy::NotPinnedInSource
            } else {
                SkipWhy::NotInSource
            });
        };
        // Tags the source also runs this repository at without a digest: other versions, so
        // only the tag can tell which one a target reference is.
        let unpinned: Vec<&Option<String>> = self
            .unpinned
            .get(&name)
            .into_iter()
            .flatten()
            .filter(|tag| !carried.iter().any(|c| &c.tag == *tag))
            .collect();
        if unpinned.iter().any(|tag| tag.as_deref() == target.tag()) {
            return Err(SkipWhy::NotPinnedInSource);
        }
        match carried.as_slice() {
            [one] if unpinned.is_empty() => Ok(one.clone()),
            many => {
                // Several versions of one repository in the source: only a reference with the
                // same tag tells which one this is.
                let same_tag: Vec<&Carried> = many
                    .iter()
                    .filter(|c| c.tag.is_some() && c.tag.as_deref() == target.tag())
                    .collect();
                match same_tag.as_slice() {
                    [one] => Ok((*one).clone()),
                    _ => Err(SkipWhy::Ambiguous(
                        many.iter()
                            .map(|c| match &c.tag {
                                Some(tag) => format!("{tag}@{}", c.digest.short()),
                                None => c.digest.short(),
                            })
                            .chain(unpinned.iter().map(|tag| {
                                format!("{} without a digest", tag.as_deref().unwrap_or("latest"))
                            }))
                            .collect(),
                    )),
                }
            }
        }
    }
}

/// The reference a field stands for and the digest it pins, if it parses.
fn pinned(field: &ImageField) -> Option<(Reference, Option<Digest>)> {
    let reference = Reference::parse(&field.value).ok()?;
    let digest = match &field.origin {
        Origin::Container { .. } | Origin::HelmImage(_) => reference.digest().cloned(),
        Origin::KustomizeImage { current_digest, .. } => current_digest
            .as_deref()
            .and_then(|d| Digest::parse(d).ok()),
    };
    Some((reference, digest))
}

/// Why a target reference is left as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "why", content = "versions", rename_all = "snake_case")]
pub enum SkipWhy {
    /// The source stage does not use this repository.
    NotInSource,
    /// The source stage uses it without a digest: nothing converged there to carry.
    NotPinnedInSource,
    /// The source pins several versions and the target's tag matches none (or several).
    Ambiguous(Vec<String>),
}

/// A target reference left alone, named for the output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skip {
    pub file: PathBuf,
    pub line: usize,
    pub image: String,
    #[serde(flatten)]
    pub why: SkipWhy,
}

impl Skip {
    /// The sentence for people, with the source stage's name.
    pub fn describe(&self, source: &str) -> String {
        let why = match &self.why {
            SkipWhy::NotInSource => format!("{source} does not use this repository"),
            SkipWhy::NotPinnedInSource => {
                format!("{source} uses this repository without a digest, so nothing converged there to carry")
            }
            SkipWhy::Ambiguous(versions) => format!(
                "{source} pins several versions ({}) and this tag matches none of them",
                versions.join(", ")
            ),
        };
        format!(
            "{}:{}: {}: left as it is: {why}",
            self.file.display(),
            self.line,
            self.image
        )
    }
}

/// The plan that carries `source`'s digests into the target stage's files, and the
/// references it leaves alone. Digest-only target references are carried too. A digest
/// `holds` names (a revert moved a field away from it) is held, not carried: it comes back
/// once the source stage pins another.
pub fn plan(target: &[ScannedFile], source: &SourcePins, holds: &Holds) -> (Plan, Vec<Skip>) {
    plan_aged(target, source, holds, &Ages::default())
}

/// [`plan`], where a digest younger than its `images.minimum_age` (as `ages` knows it) is
/// not carried yet: its fields are held, saying when it will be old enough.
pub(crate) fn plan_aged(
    target: &[ScannedFile],
    source: &SourcePins,
    holds: &Holds,
    ages: &Ages,
) -> (Plan, Vec<Skip>) {
    let mut plan = plan::plan_by(target, |current| match source.decide(current) {
        Ok(carried) => {
            let reference = match &carried.tag {
                Some(tag) => current.retagged(tag),
                None => current.clone(),
            };
            match holds.why(&reference, &carried.digest) {
                Some(hold) => Wanted::Held {
                    reason: hold.reason.clone(),
                    commit: Some(hold.commit.clone()),
                    age: None,
                    reference,
                    digest: carried.digest,
                },
                None => plan::old_enough(ages, current, reference, carried.digest),
            }
        }
        Err(_) => Wanted::Leave,
    });
    plan::note_ages(&mut plan.changes, ages);
    let mut skips = Vec::new();
    for file in target {
        for field in &file.fields {
            let Some((reference, _)) = pinned(field) else {
                continue;
            };
            if let Err(why) = source.decide(&reference) {
                skips.push(Skip {
                    file: file.path.clone(),
                    line: field.line,
                    image: field.value.clone(),
                    why,
                });
            }
        }
    }
    (plan, skips)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::scan;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn file(path: &str, text: &str) -> ScannedFile {
        let fields = scan(std::path::Path::new(path), text.as_bytes())
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .fields;
        ScannedFile {
            path: PathBuf::from(path),
            source: text.as_bytes().to_vec(),
            fields,
        }
    }

    fn deployment(image: &str) -> String {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: {image}   # keep me\n"
        )
    }

    /// A scanned Deployment at `path` running `image`.
    fn deployed(path: &str, image: &str) -> ScannedFile {
        file(path, &deployment(image))
    }

    /// The carry plan for `target` from `source`, with nothing held.
    fn carry(target: &[ScannedFile], source: &SourcePins) -> (Plan, Vec<Skip>) {
        plan(target, source, &Holds::default())
    }

    #[test]
    fn plain_manifests_get_the_source_tag_and_digest_byte_exactly() {
        let source = [deployed(
            "staging/web.yaml",
            &format!("ghcr.io/acme/web:1.4.2@{A}"),
        )];
        let target_text = deployment(&format!("ghcr.io/acme/web:1.4.1@{B}"));
        let target = [file("production/web.yaml", &target_text)];
        let (plan, skips) = carry(&target, &SourcePins::from_files(&source));
        assert!(skips.is_empty());
        assert_eq!(plan.files.len(), 1);
        let expected = target_text.replace(&format!("1.4.1@{B}"), &format!("1.4.2@{A}"));
        assert_eq!(
            String::from_utf8(plan.files[0].updated.clone()).unwrap(),
            expected
        );
        assert_eq!(plan.changes[0].new_digest.to_string(), A);
        assert_eq!(plan.changes[0].new_tag.as_deref(), Some("1.4.2"));
    }

    #[test]
    fn kustomize_entries_are_matched_after_new_name_and_moved_together() {
        let source = [file(
            "overlays/staging/kustomization.yaml",
            &format!("images:\n- name: web\n  newName: registry.example.com/acme/web\n  newTag: \"2.0.0\"\n  digest: {A}\n"),
        )];
        let target_text =
            "images:\n- name: web\n  newName: registry.example.com/acme/web\n  newTag: \"1.9.0\"\n"
                .to_string();
        let target = [file("overlays/production/kustomization.yaml", &target_text)];
        let (plan, skips) = carry(&target, &SourcePins::from_files(&source));
        assert!(skips.is_empty(), "{skips:?}");
        let updated = String::from_utf8(plan.files[0].updated.clone()).unwrap();
        assert!(updated.contains("newTag: \"2.0.0\""), "{updated}");
        assert!(updated.contains(&format!("digest: {A}")), "{updated}");
        // A plain manifest naming the same repository is carried as well.
        let plain = [deployed(
            "production/web.yaml",
            "registry.example.com/acme/web:1.9.0",
        )];
        let (plan, _) = carry(&plain, &SourcePins::from_files(&source));
        assert_eq!(
            plan.changes[0].new_value,
            format!("registry.example.com/acme/web:2.0.0@{A}")
        );
    }

    #[test]
    fn repositories_the_source_does_not_pin_are_named_skips() {
        let source = [
            deployed("staging/web.yaml", &format!("ghcr.io/acme/web:1.0@{A}")),
            deployed("staging/db.yaml", "ghcr.io/acme/db:15"),
        ];
        let target = [
            deployed("production/db.yaml", "ghcr.io/acme/db:14"),
            deployed("production/cache.yaml", "redis:7"),
        ];
        let pins = SourcePins::from_files(&source);
        let (plan, skips) = carry(&target, &pins);
        assert!(plan.files.is_empty());
        assert_eq!(skips.len(), 2);
        assert_eq!(skips[0].why, SkipWhy::NotPinnedInSource);
        assert_eq!(skips[1].why, SkipWhy::NotInSource);
        assert!(skips[1]
            .describe("staging")
            .contains("production/cache.yaml:10: redis:7: left as it is: staging does not use"));
    }

    #[test]
    fn two_versions_in_the_source_are_told_apart_by_tag_or_skipped() {
        let source = [
            deployed("staging/a.yaml", &format!("ghcr.io/acme/web:1.0@{A}")),
            deployed("staging/b.yaml", &format!("ghcr.io/acme/web:2.0@{B}")),
        ];
        let pins = SourcePins::from_files(&source);
        let (plan, skips) = carry(&[deployed("p/a.yaml", "ghcr.io/acme/web:2.0")], &pins);
        assert!(skips.is_empty());
        assert_eq!(plan.changes[0].new_digest.to_string(), B);
        let (plan, skips) = carry(&[deployed("p/a.yaml", "ghcr.io/acme/web:3.0")], &pins);
        assert!(plan.files.is_empty());
        assert!(matches!(&skips[0].why, SkipWhy::Ambiguous(v) if v.len() == 2));
    }

    #[test]
    fn a_repository_the_source_also_runs_unpinned_at_another_tag_is_not_carried_by_guess() {
        // Staging runs web pinned, and a worker from the same repository at another tag that
        // is not pinned yet: production's worker must not get web's digest.
        let source = [
            deployed("staging/web.yaml", &format!("ghcr.io/acme/app:web-1.5@{A}")),
            deployed("staging/worker.yaml", "ghcr.io/acme/app:worker-1.5"),
        ];
        let pins = SourcePins::from_files(&source);
        let target = [
            deployed(
                "production/web.yaml",
                &format!("ghcr.io/acme/app:web-1.4@{B}"),
            ),
            deployed(
                "production/worker.yaml",
                &format!("ghcr.io/acme/app:worker-1.4@{B}"),
            ),
        ];
        let (plan, skips) = carry(&target, &pins);
        assert!(
            plan.changes
                .iter()
                .all(|c| c.file != std::path::Path::new("production/worker.yaml")),
            "the worker was given web's digest: {:?}",
            plan.changes
        );
        // Two versions in staging, and neither tag is production's: both are named skips.
        assert!(plan.files.is_empty(), "{:?}", plan.changes);
        assert_eq!(skips.len(), 2, "{skips:?}");
        assert!(
            matches!(&skips[1].why, SkipWhy::Ambiguous(v) if v.iter().any(|v| v.contains("worker-1.5"))),
            "{skips:?}"
        );
        // The same tag as the unpinned use: nothing converged there to carry.
        let (plan, skips) = carry(
            &[deployed("p/w.yaml", "ghcr.io/acme/app:worker-1.5")],
            &pins,
        );
        assert!(plan.files.is_empty());
        assert_eq!(skips[0].why, SkipWhy::NotPinnedInSource);
        // A target reference with the pinned tag is still carried.
        let (plan, skips) = carry(&[deployed("p/w.yaml", "ghcr.io/acme/app:web-1.5")], &pins);
        assert!(skips.is_empty(), "{skips:?}");
        assert_eq!(plan.changes[0].new_digest.to_string(), A);
    }

    #[test]
    fn already_promoted_is_nothing_to_do_and_the_fingerprint_follows_the_digests() {
        let text = deployment(&format!("ghcr.io/acme/web:1.0@{A}"));
        let pins = SourcePins::from_files(&[file("s/web.yaml", &text)]);
        let (plan, skips) = carry(&[file("p/web.yaml", &text)], &pins);
        assert!(plan.files.is_empty() && skips.is_empty());
        let other =
            SourcePins::from_files(&[deployed("s/web.yaml", &format!("ghcr.io/acme/web:1.0@{B}"))]);
        assert_ne!(pins.fingerprint(), other.fingerprint());
        assert_eq!(
            pins.fingerprint(),
            SourcePins::from_files(&[file("x.yaml", &text)]).fingerprint()
        );
    }

    #[test]
    fn a_digest_too_young_is_not_carried_until_old_enough_and_the_others_are() {
        const NOW: i64 = 1_796_000_000;
        let staging = SourcePins::from_files(&[
            deployed("s/web.yaml", &format!("ghcr.io/acme/web:1.5@{A}")),
            deployed("s/api.yaml", &format!("ghcr.io/acme/api:2@{A}")),
        ]);
        let production = [
            deployed("p/web.yaml", &format!("ghcr.io/acme/web:1.4@{B}")),
            deployed("p/api.yaml", &format!("ghcr.io/acme/api:1@{B}")),
        ];
        let rules = crate::age::MinimumAges::compile([(
            "ghcr.io/acme/web",
            std::time::Duration::from_secs(86_400),
        )])
        .unwrap();
        let mut ages = Ages::new(rules, NOW);
        let web = Reference::parse("ghcr.io/acme/web:1.5").unwrap();
        let subject = crate::age::Subject::of(&web, &Digest::parse(A).unwrap());
        let born = |at| crate::age::Born {
            at,
            source: crate::age::Source::Annotation,
        };
        ages.born.insert(subject.clone(), born(NOW - 3600));

        let (plan, _) = plan_aged(&production, &staging, &Holds::default(), &ages);
        // api (no entry) is carried; web, an hour old under a day, waits at B.
        let carried: Vec<&str> = plan.changes.iter().map(|c| c.image.as_str()).collect();
        assert_eq!(carried, ["ghcr.io/acme/api:2"]);
        let [held] = plan.held.as_slice() else {
            panic!("{:?}", plan.held)
        };
        assert_eq!(held.value, format!("ghcr.io/acme/web:1.4@{B}"));
        assert_eq!(held.would_be.to_string(), A);
        assert_eq!(held.age.as_ref().unwrap().seconds, 3600);
        assert!(held.reason.contains("minimum age 1d"), "{}", held.reason);

        ages.born.insert(subject, born(NOW - 86_400));
        let (plan, _) = plan_aged(&production, &staging, &Holds::default(), &ages);
        assert!(plan.held.is_empty());
        let web = plan
            .changes
            .iter()
            .find(|c| c.image == "ghcr.io/acme/web:1.5");
        assert_eq!(web.unwrap().age.as_ref().unwrap().seconds, 86_400);
    }

    #[test]
    fn a_held_digest_is_not_carried_until_the_source_pins_another() {
        let staging = |digest| {
            SourcePins::from_files(&[deployed(
                "s/web.yaml",
                &format!("ghcr.io/acme/web:1.5@{digest}"),
            )])
        };
        let production = [deployed("p/web.yaml", &format!("ghcr.io/acme/web:1.4@{B}"))];
        let mut holds = Holds::default();
        holds.hold(
            "ghcr.io/acme/web",
            A,
            crate::policy::Hold {
                reason: "revert 0123456789ab moved this image away".into(),
                commit: "0123456789abcdef".into(),
            },
        );
        let (held, skips) = plan(&production, &staging(A), &holds);
        assert!(held.files.is_empty() && skips.is_empty(), "{held:?}");
        assert_eq!(held.held.len(), 1);
        assert_eq!(held.held[0].commit.as_deref(), Some("0123456789abcdef"));
        // Staging moves on to another digest: carried again.
        const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
        let (moved_on, _) = plan(&production, &staging(C), &holds);
        assert_eq!(moved_on.changes[0].new_digest.to_string(), C);
        assert!(moved_on.held.is_empty());
    }
}
