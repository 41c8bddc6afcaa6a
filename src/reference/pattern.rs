//! Which images a rule names: the one matching rule of every entry that names images
//! (`images.signatures`, `images.policies`, `images.manage` and `images.ignore`), for every
//! command (sync, pin, plan, promote, revert, the operator).
//!
//! A rule and an image match when they name the same repository however either is written:
//! `acme/web`, `docker.io/acme/web`, `index.docker.io/acme/web` and
//! `registry-1.docker.io/acme/web` are one repository, as are `LOCALHOST:5000/x` and
//! `localhost:5000/x`. So a pattern is read the way an image name is read (Docker's rule for
//! telling a registry from a path, [`normalize_registry`] for the registry), and matched
//! against the image's [`Reference::canonical_name`]: never against the spelling a manifest
//! happens to use, which would let another spelling of the same image past a rule.
//!
//! Globs are `globset`'s, where `*` also crosses `/`. A registry part that is itself a glob
//! (`*/acme/*`, `*.pkg.dev/*`) is lowercased and matched as written.

use globset::{Glob, GlobMatcher};

use super::{normalize_registry, Reference, DOCKER_HUB_DOMAIN, OFFICIAL_REPO_PREFIX};

/// A compiled image pattern.
#[derive(Debug, Clone)]
pub(crate) struct ImagePattern {
    matcher: GlobMatcher,
}

impl ImagePattern {
    /// Compiles `pattern` (an image name, globs allowed).
    pub fn new(pattern: &str) -> Result<ImagePattern, globset::Error> {
        let matcher = Glob::new(&normalize(pattern))?.compile_matcher();
        Ok(ImagePattern { matcher })
    }

    /// Whether `reference` names a repository this pattern names.
    pub fn matches(&self, reference: &Reference) -> bool {
        self.matcher.is_match(reference.canonical_name())
    }
}

fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '[', '{'])
}

/// The pattern in the canonical spelling of the names it matches: what to build a glob from
/// where many patterns are matched at once (a `GlobSet`) against canonical names.
pub fn normalize(pattern: &str) -> String {
    let Some((first, rest)) = pattern.split_once('/') else {
        // One segment: an official Docker Hub image (`nginx`, `nginx-*`), unless it begins
        // with a glob (`*`, `**`, `*nginx*`), which then spans whole names.
        return if pattern.starts_with(['*', '?', '[', '{']) {
            pattern.to_string()
        } else {
            format!("{DOCKER_HUB_DOMAIN}/{OFFICIAL_REPO_PREFIX}{pattern}")
        };
    };
    if is_glob(first) {
        return format!("{}/{rest}", first.to_ascii_lowercase());
    }
    // Docker's rule: a first segment with `.` or `:`, `localhost`, or an upper-case letter
    // is a registry; anything else is a Docker Hub path.
    let is_registry = first.contains(['.', ':'])
        || first == "localhost"
        || first.chars().any(|c| c.is_ascii_uppercase());
    if !is_registry {
        return format!("{DOCKER_HUB_DOMAIN}/{pattern}");
    }
    let registry = normalize_registry(first);
    if registry == DOCKER_HUB_DOMAIN
        && !rest.contains('/')
        && !rest.starts_with(['*', '?', '[', '{'])
    {
        format!("{registry}/{OFFICIAL_REPO_PREFIX}{rest}")
    } else {
        format!("{registry}/{rest}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, image: &str) -> bool {
        ImagePattern::new(pattern)
            .unwrap()
            .matches(&Reference::parse(image).unwrap())
    }

    /// Every spelling of a rule and of an image that name the same repository match; the same
    /// table decides for every command, as each asks [`ImagePattern::matches`].
    #[test]
    fn a_rule_and_an_image_match_however_either_spells_the_repository() {
        let hub = [
            "acme/web",
            "docker.io/acme/web",
            "index.docker.io/acme/web",
            "registry-1.docker.io/acme/web",
            "DOCKER.IO/acme/web",
            "docker.io:443/acme/web",
        ];
        for rule in hub
            .iter()
            .chain(&["acme/*", "docker.io/acme/*", "index.docker.io/acme/*"])
        {
            for image in hub {
                assert!(matches(rule, &format!("{image}:1")), "{rule} ~ {image}");
            }
            assert!(!matches(rule, "ghcr.io/acme/web:1"), "{rule} !~ ghcr.io");
            assert!(
                !matches(rule, "acme/api:1") || rule.ends_with('*'),
                "{rule}"
            );
        }
        let official = [
            "nginx",
            "library/nginx",
            "docker.io/nginx",
            "docker.io/library/nginx",
            "index.docker.io/library/nginx",
            "registry-1.docker.io/library/nginx",
        ];
        for rule in official {
            for image in official {
                assert!(matches(rule, &format!("{image}:1.27")), "{rule} ~ {image}");
            }
        }
        let local = [
            "localhost:5000/sig/app",
            "LOCALHOST:5000/sig/app",
            "LocalHost:5000/sig/app",
        ];
        for rule in [
            "localhost:5000/sig/*",
            "LOCALHOST:5000/sig/*",
            "localhost:5000/sig/app",
        ] {
            for image in local {
                assert!(matches(rule, image), "{rule} ~ {image}");
            }
            assert!(
                !matches(rule, "localhost:5001/sig/app"),
                "{rule}: another port"
            );
        }
        for rule in [
            "registry.example.com/team/*",
            "registry.example.com:443/team/*",
        ] {
            for image in [
                "registry.example.com/team/app",
                "REGISTRY.example.com:443/team/app",
            ] {
                assert!(matches(rule, image), "{rule} ~ {image}");
            }
        }
    }

    #[test]
    fn globs_over_registries_and_whole_names_still_match() {
        assert!(matches("*", "nginx"));
        assert!(matches("**", "ghcr.io/acme/web:1"));
        assert!(matches("*/acme/*", "ghcr.io/acme/web"));
        assert!(matches("*/acme/*", "acme/web"));
        assert!(matches("*.pkg.dev/*", "europe-docker.PKG.dev/p/r/app"));
        assert!(matches("nginx*", "nginx-unprivileged:1"));
        assert!(!matches("nginx*", "ghcr.io/nginx:1"));
        assert!(matches("*nginx*", "ghcr.io/acme/nginx-sidecar:1"));
        assert!(!matches("ghcr.io/acme/*", "ghcr.io/other/web"));
    }
}
