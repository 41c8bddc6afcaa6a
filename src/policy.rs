//! Following versions: which tag an image moves to under its `images.policies` entry.
//!
//! Without a policy tagpin keeps the tag written and pins its digest. Renovate, Argo CD Image
//! Updater, Flux image automation and Kargo also move `app:1.4.2` to `app:1.4.3` under a semver
//! range or a tag pattern; this module decides that move. It is pure: a policy and a tag list
//! in, one tag out. Listing tags (once per repository per pass, only for repositories whose
//! policy needs them) is the caller's I/O; rewriting tag and digest together is the planner's.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use regex::Regex;
use semver::{Version, VersionReq};

use crate::config::{Order, PolicyRule, TagPolicy};
use crate::reference::pattern::ImagePattern;
use crate::reference::Reference;
use crate::resolution::RegistryError;

/// A compiled policy.
#[derive(Debug, Clone)]
pub enum Policy {
    /// Keep the tag written, pin its digest.
    Digest,
    /// The highest tag whose version satisfies `range`.
    Semver { range: VersionReq },
    /// The highest tag `regex` matches, compared by what `extract` makes of its groups.
    Pattern {
        regex: Regex,
        extract: String,
        order: Order,
    },
}

/// Policies are named in errors as they are written in the configuration.
impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Digest => f.write_str("digest"),
            Policy::Semver { range } => write!(f, "semver {:?}", range.to_string()),
            Policy::Pattern { regex, .. } => write!(f, "pattern {:?}", regex.as_str()),
        }
    }
}

/// An `images.policies` entry that does not compile, named as it is written.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{glob:?}: invalid glob: {}", source.kind())]
    Glob {
        glob: String,
        #[source]
        source: globset::Error,
    },
    #[error("{range:?}: {source}")]
    Range {
        range: String,
        #[source]
        source: semver::Error,
    },
    #[error("{pattern:?}: {source}")]
    Pattern {
        pattern: String,
        #[source]
        source: regex::Error,
    },
}

/// Why a field's tag cannot be moved under its policy; the field is then left alone. Each
/// names the image and the policy.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FollowError {
    #[error("{image}: cannot list tags for policy {policy}: {source}")]
    TagsUnlisted {
        image: String,
        policy: Policy,
        /// Boxed: it is large, and most fields never meet it.
        #[source]
        source: Box<RegistryError>,
    },
    /// The caller did not list the repository's tags (a bug in the caller, not the registry).
    #[error("{image}: tags not listed for policy {policy}")]
    NotAsked { image: String, policy: Policy },
    #[error("{image}: policy {policy} matches none of the {tags} tag(s) the registry lists; the tag is left as it is")]
    NoMatch {
        image: String,
        policy: Policy,
        tags: usize,
    },
}

impl Policy {
    fn compile(policy: &TagPolicy) -> Result<Policy, PolicyError> {
        Ok(match policy {
            TagPolicy::Digest => Policy::Digest,
            TagPolicy::Semver { range } => Policy::Semver {
                range: VersionReq::parse(range).map_err(|source| PolicyError::Range {
                    range: range.clone(),
                    source,
                })?,
            },
            TagPolicy::Pattern {
                pattern,
                extract,
                order,
            } => Policy::Pattern {
                regex: Regex::new(pattern).map_err(|source| PolicyError::Pattern {
                    pattern: pattern.clone(),
                    source,
                })?,
                extract: extract.clone(),
                order: *order,
            },
        })
    }

    /// Whether the policy needs the repository's tag list (every policy but `digest`).
    pub(crate) fn needs_tags(&self) -> bool {
        !matches!(self, Policy::Digest)
    }

    /// The tag to move to, among `tags`; `current` is the tag written now. `None` when no tag
    /// qualifies. Among tags that compare equal (`1.4.3` and `v1.4.3`, `build-07` and
    /// `build-7`) the current tag wins, then a tag spelled like it (with or without `v`), then
    /// the alphabetically first, so the choice never flips between passes.
    pub fn select(&self, current: &str, tags: &[String]) -> Option<String> {
        match self {
            Policy::Digest => Some(current.to_string()),
            Policy::Semver { range } => highest(
                tags.iter()
                    .filter_map(|tag| Some((version_of(tag)?, tag.as_str())))
                    .filter(|(version, _)| range.matches(version))
                    .map(|(v, tag)| ((v.major, v.minor, v.patch, v.pre), tag)),
                Ord::cmp,
                current,
            ),
            Policy::Pattern {
                regex,
                extract,
                order,
            } => {
                let extracted = tags.iter().filter_map(|tag| {
                    let captures = regex.captures(tag)?;
                    let mut value = String::new();
                    captures.expand(extract, &mut value);
                    Some((value, tag.as_str()))
                });
                match order {
                    Order::Alphabetical => highest(extracted, Ord::cmp, current),
                    Order::Numerical => highest(
                        extracted.filter_map(|(value, tag)| {
                            let number: f64 = value.trim().parse().ok()?;
                            number.is_finite().then_some((number, tag))
                        }),
                        f64::total_cmp,
                        current,
                    ),
                }
            }
        }
    }
}

/// A tag read as a semantic version, with or without a leading `v` (`1.4.3`, `v1.4.3`).
fn version_of(tag: &str) -> Option<Version> {
    Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()
}

/// The tag with the highest key; ties broken as [`Policy::select`] says.
fn highest<'t, K>(
    candidates: impl Iterator<Item = (K, &'t str)>,
    compare: impl Fn(&K, &K) -> Ordering,
    current: &str,
) -> Option<String> {
    let spelled_like_current = |tag: &str| tag.starts_with('v') == current.starts_with('v');
    let preference = |tag: &str| (tag == current, spelled_like_current(tag));
    candidates
        .max_by(|(a, a_tag), (b, b_tag)| {
            compare(a, b)
                .then_with(|| preference(a_tag).cmp(&preference(b_tag)))
                .then_with(|| b_tag.cmp(a_tag))
        })
        .map(|(_, tag)| tag.to_string())
}

/// The `images.policies` entries, compiled once.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    rules: Vec<(ImagePattern, Policy)>,
}

const DIGEST: Policy = Policy::Digest;

impl Policies {
    /// Compiles the configuration's entries. The configuration validated them at load, so an
    /// error here means a `Config` built by hand.
    pub fn compile(rules: &[PolicyRule]) -> Result<Policies, PolicyError> {
        let rules = rules
            .iter()
            .map(|rule| {
                let pattern =
                    ImagePattern::new(&rule.matches).map_err(|source| PolicyError::Glob {
                        glob: rule.matches.clone(),
                        source,
                    })?;
                Ok((pattern, Policy::compile(&rule.policy)?))
            })
            .collect::<Result<_, PolicyError>>()?;
        Ok(Policies { rules })
    }

    /// The policy of the first entry whose pattern names the image's repository, however
    /// either is spelled ([`ImagePattern`]); `digest` when none does.
    pub fn for_image(&self, reference: &Reference) -> &Policy {
        self.rules
            .iter()
            .find(|(pattern, _)| pattern.matches(reference))
            .map_or(&DIGEST, |(_, policy)| policy)
    }
}

/// A repository whose tags are listed: one list per pass, whatever the spellings and tags of
/// the references to it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RepositoryKey {
    pub domain: String,
    pub repository: String,
}

impl RepositoryKey {
    pub fn of(reference: &Reference) -> RepositoryKey {
        RepositoryKey {
            domain: reference.domain().to_string(),
            repository: reference.repository(),
        }
    }
}

/// What the registry answered for each repository's tag list.
pub(crate) type TagLists = BTreeMap<RepositoryKey, Result<Vec<String>, RegistryError>>;

/// Policies and the tag lists they choose from: what the planner needs to move tags. The
/// default (no policies) keeps every tag, which is tagpin's behaviour without `images.policies`.
#[derive(Debug, Default)]
pub struct Follow {
    pub policies: Policies,
    pub tags: TagLists,
    /// Digests no field is pinned to (a revert moved fields away from them), read from Git.
    pub held: Holds,
    /// Which images need a signature, and this pass's verdicts on the digests it would pin
    /// (`images.signatures`); the default requires none.
    pub signatures: crate::signature::Verdicts,
    /// Which images need build provenance, and this pass's verdicts on the digests it would
    /// pin (`images.provenance`); the default requires none.
    pub provenance: crate::provenance::Verdicts,
    /// Which images a digest must be old enough for, and when each digest this pass would pin
    /// was built (`images.minimum_age`); the default requires no age.
    pub ages: crate::age::Ages,
}

/// Digests held per image repository (`registry/path`, as [`Reference::canonical_name`]
/// spells it), each with why: a revert moved a field away from it, and until the tag points
/// to another digest no field is pinned to it again.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Holds(BTreeMap<String, BTreeMap<String, Hold>>);

/// Why a digest is held, and the commit that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub reason: String,
    pub commit: String,
}

impl Holds {
    /// Holds `digest` of `repository`, with why; the first hold found (the newest) stays.
    pub fn hold(&mut self, repository: &str, digest: &str, hold: Hold) {
        self.0
            .entry(repository.to_string())
            .or_default()
            .entry(digest.to_string())
            .or_insert(hold);
    }

    /// Why `digest` is held for `reference`'s repository, if it is.
    pub fn why(&self, reference: &Reference, digest: &crate::reference::Digest) -> Option<&Hold> {
        let digests = self.0.get(&reference.canonical_name())?;
        digests.get(&digest.to_string())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Follow {
    /// Why `digest` is held for `reference`, if it is ([`Holds`]).
    pub fn held(&self, reference: &Reference, digest: &crate::reference::Digest) -> Option<&Hold> {
        self.held.why(reference, digest)
    }

    /// One reference per repository whose tags must be listed: those with a policy that
    /// chooses among tags, digest-only references aside.
    pub(crate) fn repositories_to_list<'r>(
        policies: &Policies,
        references: impl IntoIterator<Item = &'r Reference>,
    ) -> BTreeMap<RepositoryKey, &'r Reference> {
        let mut wanted = BTreeMap::new();
        for reference in references {
            if !reference.is_digest_only() && policies.for_image(reference).needs_tags() {
                wanted
                    .entry(RepositoryKey::of(reference))
                    .or_insert(reference);
            }
        }
        wanted
    }

    /// The reference to resolve for a field: the same one, or with the tag its policy picks.
    /// An error names the image, the policy and how many tags were seen; the field is then
    /// left alone.
    pub fn target(&self, reference: &Reference) -> Result<Reference, FollowError> {
        let policy = self.policies.for_image(reference);
        let Some(current) = reference.effective_tag().filter(|_| policy.needs_tags()) else {
            return Ok(reference.clone());
        };
        let image = reference.canonical_name();
        let tags = match self.tags.get(&RepositoryKey::of(reference)) {
            Some(Ok(tags)) => tags,
            Some(Err(e)) => {
                return Err(FollowError::TagsUnlisted {
                    image,
                    policy: policy.clone(),
                    source: Box::new(e.clone()),
                })
            }
            None => {
                return Err(FollowError::NotAsked {
                    image,
                    policy: policy.clone(),
                })
            }
        };
        match policy.select(current, tags) {
            Some(tag) => Ok(reference.retagged(&tag)),
            None => Err(FollowError::NoMatch {
                image,
                policy: policy.clone(),
                tags: tags.len(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|t| t.to_string()).collect()
    }

    /// Asserts the tag `policy` selects for an image on `current` from `list`; a failure
    /// points at the caller's line.
    #[track_caller]
    fn assert_selects(policy: &Policy, current: &str, list: &[&str], expected: Option<&str>) {
        assert_eq!(
            policy.select(current, &tags(list)).as_deref(),
            expected,
            "{policy:?} on {current} from {list:?}"
        );
    }

    fn semver(range: &str) -> Policy {
        Policy::compile(&TagPolicy::Semver {
            range: range.into(),
        })
        .unwrap()
    }

    fn pattern(pattern: &str, extract: &str, order: Order) -> Policy {
        Policy::compile(&TagPolicy::Pattern {
            pattern: pattern.into(),
            extract: extract.into(),
            order,
        })
        .unwrap()
    }

    #[test]
    fn semver_picks_the_highest_tag_in_range_not_the_last_listed() {
        let list = [
            "1.4.2", "1.4.10", "1.4.3", "1.5.0", "latest", "1.4", "2.0.0",
        ];
        assert_selects(&semver("~1.4"), "1.4.2", &list, Some("1.4.10"));
        assert_selects(&semver("^1"), "1.4.2", &list, Some("1.5.0"));
        assert_selects(&semver(">=1.4.2, <1.4.3"), "1.4.2", &list, Some("1.4.2"));
        assert_selects(&semver("~3"), "1.4.2", &list, None);
        assert_eq!(semver("*").select("x", &tags(&[])), None);
    }

    #[test]
    fn pre_releases_count_only_when_the_range_names_one() {
        let list = ["1.4.2", "1.4.3-rc.1", "1.5.0-beta.1"];
        assert_selects(&semver("~1.4"), "1.4.2", &list, Some("1.4.2"));
        assert_selects(&semver("*"), "1.4.2", &list, Some("1.4.2"));
        assert_selects(
            &semver(">=1.4.3-rc.0, <1.5"),
            "1.4.2",
            &list,
            Some("1.4.3-rc.1"),
        );
        // A pre-release of another version stays out, as in Cargo and npm.
        assert_selects(&semver(">=1.4.3-rc.0"), "1.4.2", &list, Some("1.4.3-rc.1"));
        // A release outranks its own pre-releases.
        let with_release = ["1.4.3-rc.1", "1.4.3"];
        assert_selects(
            &semver(">=1.4.3-rc.0"),
            "1.4.2",
            &with_release,
            Some("1.4.3"),
        );
    }

    #[test]
    fn v_prefixed_tags_are_versions_and_are_written_back_as_listed() {
        let list = ["v1.4.2", "v1.4.3", "v1.5.0", "vnext", "V1.4.9"];
        assert_selects(&semver("~1.4"), "v1.4.2", &list, Some("v1.4.3"));
        let mixed = ["1.4.2", "v1.4.4", "1.4.3"];
        assert_selects(&semver("~1.4"), "1.4.2", &mixed, Some("v1.4.4"));
    }

    #[test]
    fn equal_versions_spelled_differently_keep_the_current_spelling() {
        let list = ["v1.4.3", "1.4.3", "1.4.2"];
        assert_selects(&semver("~1.4"), "1.4.2", &list, Some("1.4.3"));
        assert_selects(&semver("~1.4"), "v1.4.2", &list, Some("v1.4.3"));
        assert_selects(&semver("~1.4"), "v1.4.3", &list, Some("v1.4.3"));
        assert_selects(&semver("~1.4"), "1.4.3", &list, Some("1.4.3"));
        let numbers = ["build-7", "build-07", "build-6"];
        let builds = pattern(r"^build-(?P<n>\d+)$", "$n", Order::Numerical);
        assert_selects(&builds, "build-6", &numbers, Some("build-07"));
        assert_selects(&builds, "build-7", &numbers, Some("build-7"));
    }

    #[test]
    fn numerical_order_compares_numbers_and_alphabetical_compares_text() {
        let list = ["build-99", "build-120", "build-100", "main", "build-x"];
        let builds = pattern(r"^build-(?P<n>[0-9]+)$", "$n", Order::Numerical);
        assert_selects(&builds, "build-99", &list, Some("build-120"));
        let alphabetical = pattern(r"^build-(?P<n>[0-9]+)$", "$n", Order::Alphabetical);
        assert_selects(&alphabetical, "build-99", &list, Some("build-99"));
        let decimals = pattern(r"^r(?P<n>[0-9.]+)$", "$n", Order::Numerical);
        assert_selects(&decimals, "r1.5", &["r1.5", "r1.25", "r0.9"], Some("r1.5"));
    }

    #[test]
    fn extract_builds_the_compared_value_from_named_groups() {
        // Flux's timestamped tags: compare `<ts>` only, whatever the branch and sha in front.
        let list = [
            "main-aaaa111-1700000300",
            "main-bbbb222-1700000100",
            "feature-cccc333-1700000900",
            "main-dddd444-170000020",
        ];
        let latest_main = pattern(r"^main-[a-f0-9]+-(?P<ts>[0-9]+)$", "$ts", Order::Numerical);
        assert_selects(&latest_main, "x", &list, Some("main-aaaa111-1700000300"));
        let by_two_groups = pattern(
            r"^(?P<major>\d+)\.(?P<minor>\d+)-(?P<flavour>alpine|slim)$",
            "$flavour-$major.$minor",
            Order::Alphabetical,
        );
        let images = ["1.2-alpine", "1.9-alpine", "1.3-slim", "2.0-debian"];
        assert_selects(&by_two_groups, "x", &images, Some("1.3-slim"));
        let everything = pattern(r"^[a-z]+$", "$0", Order::Alphabetical);
        assert_selects(&everything, "x", &["beta", "alpha", "1"], Some("beta"));
    }

    #[test]
    fn the_first_matching_entry_wins_over_written_or_normalized_names() {
        let rule = |matches: &str, policy: TagPolicy| PolicyRule {
            matches: matches.into(),
            policy,
        };
        let policies = Policies::compile(&[
            rule("ghcr.io/acme/job", TagPolicy::Digest),
            rule(
                "ghcr.io/acme/*",
                TagPolicy::Semver {
                    range: "~1.4".into(),
                },
            ),
            rule(
                "docker.io/library/nginx",
                TagPolicy::Semver { range: "^1".into() },
            ),
        ])
        .unwrap();
        let policy_of = |image: &str| {
            policies
                .for_image(&Reference::parse(image).unwrap())
                .to_string()
        };
        assert_eq!(policy_of("ghcr.io/acme/job:1"), "digest");
        assert_eq!(policy_of("ghcr.io/acme/web:1.4.2@sha256:1111111111111111111111111111111111111111111111111111111111111111"), "semver \"~1.4\"");
        assert_eq!(policy_of("nginx:1.27"), "semver \"^1\"");
        assert_eq!(policy_of("quay.io/other/app:1"), "digest");
    }

    #[test]
    fn a_policy_that_matches_no_tag_names_image_policy_and_count() {
        let policies = Policies::compile(&[PolicyRule {
            matches: "ghcr.io/acme/*".into(),
            policy: TagPolicy::Semver { range: "~9".into() },
        }])
        .unwrap();
        let web = Reference::parse("ghcr.io/acme/web:1.4.2").unwrap();
        let mut follow = Follow {
            policies,
            tags: TagLists::new(),
            held: Holds::default(),
            ..Follow::default()
        };
        follow
            .tags
            .insert(RepositoryKey::of(&web), Ok(tags(&["1.4.2", "1.4.3"])));
        assert_eq!(
            follow.target(&web).unwrap_err().to_string(),
            "ghcr.io/acme/web: policy semver \"~9\" matches none of the 2 tag(s) the registry lists; the tag is left as it is"
        );
        let other = Reference::parse("nginx:1.27").unwrap();
        assert_eq!(follow.target(&other).unwrap(), other);
        assert!(
            Follow::repositories_to_list(&follow.policies, [&web, &other, &web])
                .keys()
                .map(|k| k.repository.as_str())
                .eq(["acme/web"])
        );
    }
}
