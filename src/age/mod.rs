//! A minimum age for a new digest (`images.minimum_age`): a digest younger than its entry's
//! `age` is not pinned yet, so a compromised or broken push is not in Git within minutes.
//!
//! A digest's age is counted from when it was built, as the registry says: the image config's
//! `created`, or the `org.opencontainers.image.created` annotation of the manifest or index
//! ([`created`] reads them, pure; [`fetch`] asks the registry). With neither, it is counted
//! from when tagpin first resolved a tag to it, kept in a file beside the mirror so a restart
//! does not start it again ([`seen`]). What this module decides is pure: [`decide`] compares
//! a digest's birth with the entry's age and the clock.
//!
//! Entries match images as `images.signatures` entries do ([`ImagePattern`]); the first that
//! matches applies, and an entry with `age: 0` exempts the images it matches.

pub mod created;
pub mod fetch;
pub mod seen;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::reference::pattern::ImagePattern;
use crate::reference::{Digest, Reference};

/// A digest of an image repository: what a gate (an age, a signature) is known for.
pub(crate) use crate::reference::Subject;

/// An `images.minimum_age` entry's `match` does not compile (only for a `Config` not loaded
/// from a file, which validates them).
#[derive(Debug, thiserror::Error)]
#[error("images.minimum_age[{index}].match: invalid glob {glob:?}: {source}")]
pub struct AgeRuleError {
    pub index: usize,
    pub glob: String,
    #[source]
    pub source: globset::Error,
}

/// The `images.minimum_age` entries, compiled once.
#[derive(Debug, Clone, Default)]
pub struct MinimumAges {
    rules: Vec<(ImagePattern, Duration)>,
}

impl MinimumAges {
    /// Compiles the configuration's entries, each a `match` pattern and its age, in order
    /// (`config.images.minimum_age.iter().map(|r| (r.matches.as_str(), r.age))`).
    pub fn compile<'r>(
        rules: impl IntoIterator<Item = (&'r str, Duration)>,
    ) -> Result<MinimumAges, AgeRuleError> {
        let rules = rules
            .into_iter()
            .enumerate()
            .map(|(index, (matches, age))| {
                let pattern = ImagePattern::new(matches).map_err(|source| AgeRuleError {
                    index,
                    glob: matches.to_string(),
                    source,
                })?;
                Ok((pattern, age))
            })
            .collect::<Result<_, AgeRuleError>>()?;
        Ok(MinimumAges { rules })
    }

    /// The minimum age of the first entry whose pattern names the image's repository, however
    /// either is spelled ([`ImagePattern`], as for signatures); `None` when no entry matches or
    /// the entry's age is zero (an exemption).
    pub fn for_image(&self, reference: &Reference) -> Option<Duration> {
        self.rules
            .iter()
            .find(|(pattern, _)| pattern.matches(reference))
            .map(|(_, age)| *age)
            .filter(|age| !age.is_zero())
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Where a digest's age was counted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The image config's `created`.
    Created,
    /// The `org.opencontainers.image.created` annotation of the manifest or index.
    Annotation,
    /// When tagpin first resolved a tag to the digest: the registry said nothing usable.
    FirstSeen,
}

impl Source {
    /// The `source` label of `tagpin_minimum_age_checks_total`.
    pub fn label(self) -> &'static str {
        match self {
            Source::Created => "created",
            Source::Annotation => "annotation",
            Source::FirstSeen => "first_seen",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Source::Created => "created",
            Source::Annotation => "created (annotation)",
            Source::FirstSeen => "first seen",
        }
    }
}

/// When a digest came to be (Unix seconds), and how that is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Born {
    pub at: i64,
    pub source: Source,
}

/// How old a digest is, measured against its minimum age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub born: Born,
    pub minimum: Duration,
    /// Seconds since it was born (0 for a birth in the future).
    pub age: i64,
    /// When it is old enough (Unix seconds).
    pub eligible_at: i64,
}

/// How old a digest born `born` is at `now`, against `minimum`. Pure.
pub(crate) fn decide(minimum: Duration, born: Born, now: i64) -> Decision {
    let minimum_seconds = i64::try_from(minimum.as_secs()).unwrap_or(i64::MAX);
    Decision {
        born,
        minimum,
        age: now.saturating_sub(born.at).max(0),
        eligible_at: born.at.saturating_add(minimum_seconds),
    }
}

impl Decision {
    /// Whether the digest may be pinned: at least as old as the minimum.
    pub fn eligible(&self) -> bool {
        self.age >= i64::try_from(self.minimum.as_secs()).unwrap_or(i64::MAX)
    }

    /// The `result` label of `tagpin_minimum_age_checks_total`.
    pub fn label(&self) -> &'static str {
        if self.eligible() {
            "eligible"
        } else {
            "held"
        }
    }

    /// Why a digest too young is held: `2m old (created 2026-12-07T14:00:00Z), younger than
    /// the minimum age 1h: eligible at 2026-12-07T15:00:00Z`.
    pub fn reason(&self) -> String {
        format!(
            "{} old ({} {}), younger than the minimum age {}: eligible at {}",
            human(self.age),
            self.born.source.words(),
            rfc3339(self.born.at),
            human(i64::try_from(self.minimum.as_secs()).unwrap_or(i64::MAX)),
            rfc3339(self.eligible_at)
        )
    }

    /// As reports show it.
    pub fn note(&self) -> AgeNote {
        AgeNote {
            seconds: self.age,
            eligible_at: rfc3339(self.eligible_at),
            from: self.born.source,
        }
    }
}

/// How a change's age is reported: `{seconds: 7200, eligible_at: "…", from: "created"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgeNote {
    /// How old the digest is, in seconds.
    pub seconds: i64,
    /// When it is (or was) old enough, RFC 3339.
    pub eligible_at: String,
    /// What its age is counted from: `created`, `annotation` or `first_seen`.
    pub from: Source,
}

/// The minimum ages and what this pass learned of each digest it would pin: what the planner
/// needs to hold a digest too young. The default requires no age.
#[derive(Debug, Clone, Default)]
pub struct Ages {
    pub rules: MinimumAges,
    /// When each digest this pass would pin was born.
    pub born: BTreeMap<Subject, Born>,
    /// The time the pass decides at (Unix seconds).
    pub now: i64,
}

impl Ages {
    pub fn new(rules: MinimumAges, now: i64) -> Ages {
        Ages {
            rules,
            born: BTreeMap::new(),
            now,
        }
    }

    /// How old `digest` of `wanted` is, for a field written `current`: `None` when no minimum
    /// age applies (no entry matches, or the field is already at that digest). A digest this
    /// pass has not looked at counts as born now: it is held, never pinned unchecked.
    pub(crate) fn decide(
        &self,
        current: &Reference,
        wanted: &Reference,
        digest: &Digest,
    ) -> Option<Decision> {
        let minimum = self.rules.for_image(wanted)?;
        if current.digest() == Some(digest) {
            return None;
        }
        Some(self.decide_for(minimum, wanted, digest))
    }

    /// How old `digest` of `image` is against `minimum`, whatever the field holds.
    fn decide_for(&self, minimum: Duration, image: &Reference, digest: &Digest) -> Decision {
        let born = self
            .born
            .get(&Subject::of(image, digest))
            .copied()
            .unwrap_or(Born {
                at: self.now,
                source: Source::FirstSeen,
            });
        decide(minimum, born, self.now)
    }

    /// The age of a change that moves `image` to `digest`, as reports show it: `None` when no
    /// minimum age applies to the image.
    pub fn note(&self, image: &Reference, digest: &Digest) -> Option<AgeNote> {
        let minimum = self.rules.for_image(image)?;
        Some(self.decide_for(minimum, image, digest).note())
    }
}

/// What a round of age checks found, by (`result`, `source`) of
/// `tagpin_minimum_age_checks_total`.
pub(crate) type CheckCounts = BTreeMap<(&'static str, &'static str), u64>;

/// `2026-11-23T14:05:00Z`.
pub fn rfc3339(unix: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(unix)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| unix.to_string())
}

/// `1h5m`, `2m`, `45s`, `3d2h`.
fn human(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m, s) = (s / 86_400, (s % 86_400) / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::new();
    for (n, unit) in [(d, "d"), (h, "h"), (m, "m")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_000_000;
    const HOUR: Duration = Duration::from_secs(3600);

    fn digest(n: u8) -> Digest {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
            .parse()
            .unwrap()
    }

    fn rules(entries: &[(&str, u64)]) -> MinimumAges {
        let entries = entries
            .iter()
            .map(|(matches, seconds)| (*matches, Duration::from_secs(*seconds)));
        MinimumAges::compile(entries).unwrap()
    }

    #[test]
    fn a_digest_younger_than_the_minimum_is_held_until_it_is_old_enough() {
        let born = Born {
            at: NOW - 120,
            source: Source::Created,
        };
        let young = decide(HOUR, born, NOW);
        assert!(!young.eligible());
        assert_eq!((young.age, young.eligible_at), (120, NOW - 120 + 3600));
        assert_eq!(young.label(), "held");
        assert_eq!(
            young.reason(),
            format!(
                "2m old (created {}), younger than the minimum age 1h: eligible at {}",
                rfc3339(NOW - 120),
                rfc3339(NOW + 3480)
            )
        );
        // Exactly old enough, and later: eligible.
        assert!(decide(HOUR, born, NOW + 3480).eligible());
        let old = decide(HOUR, born, NOW + 7200);
        assert_eq!((old.label(), old.age), ("eligible", 7320));
        assert_eq!(
            old.note(),
            AgeNote {
                seconds: 7320,
                eligible_at: rfc3339(NOW + 3480),
                from: Source::Created,
            }
        );
    }

    #[test]
    fn a_birth_in_the_future_counts_as_no_age_at_all() {
        let born = Born {
            at: NOW + 600,
            source: Source::FirstSeen,
        };
        let decision = decide(HOUR, born, NOW);
        assert_eq!(decision.age, 0);
        assert!(!decision.eligible());
    }

    #[test]
    fn the_first_matching_entry_applies_and_age_zero_exempts() {
        let rules = rules(&[
            ("ghcr.io/acme/hotfix", 0),
            ("ghcr.io/acme/*", 86_400),
            ("nginx", 60),
        ]);
        let at = |image: &str| rules.for_image(&Reference::parse(image).unwrap());
        assert_eq!(at("ghcr.io/acme/hotfix:1"), None);
        assert_eq!(at("GHCR.IO/acme/web:1"), Some(Duration::from_secs(86_400)));
        // Docker Hub's spellings are one repository, as for signatures.
        assert_eq!(
            at("docker.io/library/nginx:1"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            at("index.docker.io/library/nginx:1"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(at("quay.io/other/app:1"), None);
    }

    #[test]
    fn a_field_already_at_the_digest_needs_no_age_and_an_unchecked_one_is_held() {
        let mut ages = Ages::new(rules(&[("ghcr.io/acme/*", 3600)]), NOW);
        let tag = Reference::parse("ghcr.io/acme/web:1").unwrap();
        let at = Reference::parse(&format!("ghcr.io/acme/web:1@{}", digest(1))).unwrap();
        let other = Reference::parse("docker.io/library/nginx:1").unwrap();
        assert_eq!(ages.decide(&at, &tag, &digest(1)), None);
        assert_eq!(ages.decide(&other, &other, &digest(1)), None);
        let unchecked = ages.decide(&tag, &tag, &digest(1)).unwrap();
        assert!(!unchecked.eligible());
        assert_eq!(unchecked.born.source, Source::FirstSeen);
        ages.born.insert(
            Subject::of(&tag, &digest(1)),
            Born {
                at: NOW - 7200,
                source: Source::Annotation,
            },
        );
        // The already pinned digest stays; the new one moves once old enough.
        let moved = ages.decide(&at, &tag, &digest(1));
        assert_eq!(moved, None);
        assert!(ages.decide(&tag, &tag, &digest(1)).unwrap().eligible());
        assert_eq!(ages.note(&tag, &digest(1)).unwrap().seconds, 7200);
        assert_eq!(ages.note(&other, &digest(1)), None);
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(0), "0s");
        assert_eq!(human(120), "2m");
        assert_eq!(human(3900), "1h5m");
        assert_eq!(human(2 * 86_400 + 3600), "2d1h");
    }
}
