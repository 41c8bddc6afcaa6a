//! Container image references, parsed the way Docker and the registries do.
//!
//! tagpin rewrites `image:` fields in a GitOps repository, so it must agree
//! exactly with the container runtime about what a reference means
//! (`nginx` is `docker.io/library/nginx:latest`), while writing back only
//! what the user would have written (`nginx:latest@sha256:…`, never the
//! expanded form). This module implements the grammar of
//! github.com/distribution/reference (`reference.go`, `normalize.go`) by
//! hand, keeps the user's own spelling of every part, and derives the
//! normalized registry, API host and repository from it on demand.
//!
//! The module is pure: no I/O and no dependencies besides `std`, so it can
//! be tested exhaustively and used from anywhere.

use std::fmt;
use std::str::FromStr;

pub mod pattern;

/// The registry name Docker uses for Docker Hub in normalized references.
const DOCKER_HUB_DOMAIN: &str = "docker.io";
/// The legacy Docker Hub name, which Docker normalizes to [`DOCKER_HUB_DOMAIN`].
const DOCKER_HUB_LEGACY_DOMAIN: &str = "index.docker.io";
/// The host that actually serves the Docker Hub registry API.
const DOCKER_HUB_API_HOST: &str = "registry-1.docker.io";
/// The namespace of official Docker Hub images (`nginx` is `library/nginx`).
const OFFICIAL_REPO_PREFIX: &str = "library/";
/// The tag a runtime pulls when the reference has neither tag nor digest.
const DEFAULT_TAG: &str = "latest";
/// The longest name (domain and path) the distribution grammar allows.
const NAME_MAX_LEN: usize = 255;
/// The longest tag the distribution grammar allows.
const TAG_MAX_LEN: usize = 128;

/// Why a string is not a valid image reference or digest.
///
/// It keeps the whole input, the byte offset of the problem and a reason,
/// so that the message alone lets a user find and fix the bad `image:` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    subject: &'static str,
    input: String,
    offset: usize,
    reason: String,
}

impl ParseError {
    /// The string that was rejected, so callers can report it without keeping a copy.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The byte offset in [`ParseError::input`] where the problem was found,
    /// so callers can point at it (for example under a YAML line).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// What is wrong, without the input and offset, for callers that
    /// format their own messages.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} {:?}: {} (at offset {})",
            self.subject, self.input, self.reason, self.offset
        )
    }
}

impl std::error::Error for ParseError {}

/// A problem found by one of the grammar checks, before it is tied to the
/// whole input. Offsets are byte offsets into the whole input.
#[derive(Debug)]
struct Problem {
    offset: usize,
    reason: String,
}

impl Problem {
    fn new(offset: usize, reason: impl Into<String>) -> Problem {
        Problem {
            offset,
            reason: reason.into(),
        }
    }

    fn into_error(self, subject: &'static str, input: &str) -> ParseError {
        ParseError {
            subject,
            input: input.to_string(),
            offset: self.offset,
            reason: self.reason,
        }
    }
}

/// The result of one grammar check.
type Check<T> = Result<T, Problem>;

/// A content digest such as `sha256:<64 hex>`, the immutable identity that
/// tagpin pins a tag to.
///
/// `sha256` and `sha512` digests are checked for their exact length of
/// lowercase hex; other algorithms are accepted with the generic OCI grammar.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    algorithm: String,
    hex: String,
}

impl Digest {
    /// Parses `algorithm:encoded`, for digests read from registry headers
    /// or from a reference written by a user.
    pub fn parse(s: &str) -> Result<Digest, ParseError> {
        check_digest(s, 0).map_err(|problem| problem.into_error("digest", s))
    }

    /// Builds `sha256:<hex>` from a hash computed by the caller, so this
    /// module needs no hashing dependency. The hex must be 64 lowercase
    /// hex characters.
    pub(crate) fn from_sha256_hex(hex: &str) -> Result<Digest, ParseError> {
        Digest::parse(&format!("sha256:{hex}"))
    }

    /// The algorithm, such as `sha256`, so callers can pick a verifier.
    pub fn algorithm(&self) -> &str {
        &self.algorithm
    }

    /// `sha256:0f152bc1261a`: enough to tell digests apart in a table or a log line.
    pub fn short(&self) -> String {
        let cut = self.hex.len().min(12);
        format!("{}:{}", self.algorithm, &self.hex[..cut])
    }

    /// The encoded part after the `:`; lowercase hex for `sha256` and
    /// `sha512`, so callers can compare it with a hash they computed.
    pub fn hex(&self) -> &str {
        &self.hex
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.hex)
    }
}

/// Digests appear as plain strings in `--output json` and in the plan block of a PR body.
impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Digest, D::Error> {
        let text = String::deserialize(deserializer)?;
        Digest::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl FromStr for Digest {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Digest, ParseError> {
        Digest::parse(s)
    }
}

/// One name for every spelling of a registry: host names are case-insensitive, `:443` is the
/// default port of HTTPS (which registries speak), and Docker Hub answers as `docker.io`,
/// `index.docker.io` and `registry-1.docker.io`.
pub(crate) fn normalize_registry(domain: &str) -> String {
    let lower = domain.to_ascii_lowercase();
    let host = lower.strip_suffix(":443").unwrap_or(&lower);
    match host {
        DOCKER_HUB_LEGACY_DOMAIN | DOCKER_HUB_API_HOST => DOCKER_HUB_DOMAIN.to_string(),
        host => host.to_string(),
    }
}

/// An image reference as written in a manifest, such as `nginx:1.27` or
/// `localhost:5000/team/app:v1@sha256:…`.
///
/// It keeps the user's own spelling of the domain and path, so that what
/// tagpin writes back differs from the original only by the pin; the
/// normalized forms needed to talk to a registry are computed from it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference {
    /// The domain as written, `None` when the reference names none.
    domain: Option<String>,
    /// The path as written, without the domain.
    path: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

impl Reference {
    /// Parses a reference with the distribution grammar and Docker's rule
    /// for telling a domain from a path component.
    pub fn parse(s: &str) -> Result<Reference, ParseError> {
        parse_reference(s).map_err(|problem| problem.into_error("image reference", s))
    }

    /// The normalized registry name: `docker.io` when the reference names
    /// no registry or names Docker Hub as `docker.io` or `index.docker.io`,
    /// otherwise the domain as written, port included. Used to pick
    /// credentials and to group references by registry.
    pub(crate) fn domain(&self) -> &str {
        match self.domain.as_deref() {
            None | Some(DOCKER_HUB_DOMAIN) | Some(DOCKER_HUB_LEGACY_DOMAIN) => DOCKER_HUB_DOMAIN,
            Some(domain) => domain,
        }
    }

    /// The `host[:port]` to send registry API requests to, which for Docker
    /// Hub is not the registry's name but `registry-1.docker.io`.
    pub(crate) fn api_host(&self) -> &str {
        match self.domain() {
            DOCKER_HUB_DOMAIN => DOCKER_HUB_API_HOST,
            domain => domain,
        }
    }

    /// The repository path the registry API expects: `library/nginx` for a
    /// single-component Docker Hub name, otherwise the path as written.
    pub fn repository(&self) -> String {
        if self.domain() == DOCKER_HUB_DOMAIN && !self.path.contains('/') {
            format!("{OFFICIAL_REPO_PREFIX}{}", self.path)
        } else {
            self.path.clone()
        }
    }

    /// `registry/repository`, such as `docker.io/library/nginx`: one stable
    /// key for every spelling of the same repository (`nginx`,
    /// `index.docker.io/library/nginx`, `LOCALHOST:5000/x` and `localhost:5000/x`), for
    /// deduplication, holds, logs and every rule that matches images
    /// ([`pattern::ImagePattern`]). The registry is normalized by
    /// [`normalize_registry`]; the repository path stays as written, as the distribution
    /// spec makes it case-sensitive.
    pub(crate) fn canonical_name(&self) -> String {
        let registry = normalize_registry(self.domain());
        if registry == DOCKER_HUB_DOMAIN && !self.path.contains('/') {
            format!("{registry}/{OFFICIAL_REPO_PREFIX}{}", self.path)
        } else {
            format!("{registry}/{}", self.path)
        }
    }

    /// The tag as written, if any.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest as written, if any.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// The tag a runtime would resolve: the written tag, or `latest` when
    /// neither a tag nor a digest is written. `None` for digest-only
    /// references, which resolve no tag at all.
    pub(crate) fn effective_tag(&self) -> Option<&str> {
        match (&self.tag, &self.digest) {
            (Some(tag), _) => Some(tag),
            (None, None) => Some(DEFAULT_TAG),
            (None, Some(_)) => None,
        }
    }

    /// True for `repo@digest` without a tag: there is no tag to resolve, so
    /// tagpin leaves these references alone.
    pub(crate) fn is_digest_only(&self) -> bool {
        self.tag.is_none() && self.digest.is_some()
    }

    /// The same reference with another tag (a policy moved it), the user's spelling and any
    /// digest kept.
    pub(crate) fn retagged(&self, tag: &str) -> Reference {
        Reference {
            tag: Some(tag.to_string()),
            ..self.clone()
        }
    }

    /// The string to write back when pinning to `digest`: the user's own
    /// spelling (never expanded to `docker.io/library/…`), the implied tag
    /// made explicit so the pin stays readable, and the new digest in place
    /// of any old one. `nginx` becomes `nginx:latest@sha256:…`.
    pub(crate) fn with_digest(&self, digest: &Digest) -> String {
        let pinned = Reference {
            domain: self.domain.clone(),
            path: self.path.clone(),
            tag: self.effective_tag().map(str::to_string),
            digest: Some(digest.clone()),
        };
        pinned.to_string()
    }
}

impl fmt::Display for Reference {
    /// Writes the reference exactly as the user spelled it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(domain) = &self.domain {
            write!(f, "{domain}/")?;
        }
        write!(f, "{}", self.path)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl FromStr for Reference {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Reference, ParseError> {
        Reference::parse(s)
    }
}

/// Splits `s` into name, tag and digest, then checks each part from left to
/// right so the first error reported is the leftmost one.
fn parse_reference(s: &str) -> Check<Reference> {
    if s.is_empty() {
        return Err(Problem::new(0, "reference is empty"));
    }
    if let Some((offset, c)) = s.char_indices().find(|(_, c)| c.is_whitespace()) {
        return Err(Problem::new(
            offset,
            format!("contains whitespace {c:?}; image references have none"),
        ));
    }
    if is_image_id(s) {
        return Err(Problem::new(
            0,
            "a 64-character hex string is an image ID, not a repository name",
        ));
    }

    // The digest is everything after the first '@'.
    let (name_and_tag, digest_part) = match s.find('@') {
        Some(at) => (&s[..at], Some((&s[at + 1..], at + 1))),
        None => (s, None),
    };

    // The tag follows a ':' in the last path component; a ':' before the
    // last '/' belongs to the domain's port.
    let last_component_start = name_and_tag.rfind('/').map_or(0, |slash| slash + 1);
    let (name, tag_part) = match name_and_tag[last_component_start..].find(':') {
        Some(index) => {
            let colon = last_component_start + index;
            (
                &name_and_tag[..colon],
                Some((&name_and_tag[colon + 1..], colon + 1)),
            )
        }
        None => (name_and_tag, None),
    };

    let (domain, path, path_start) = split_domain(name);
    if let Some(domain) = domain {
        check_domain(domain)?;
    }
    check_path(path, path_start)?;
    if name.len() > NAME_MAX_LEN {
        return Err(Problem::new(
            NAME_MAX_LEN,
            format!(
                "name is longer than {NAME_MAX_LEN} characters (it has {})",
                name.len()
            ),
        ));
    }

    let tag = match tag_part {
        Some((tag, start)) => {
            check_tag(tag, start)?;
            Some(tag.to_string())
        }
        None => None,
    };
    let digest = match digest_part {
        Some((digest, start)) => Some(check_digest(digest, start)?),
        None => None,
    };

    Ok(Reference {
        domain: domain.map(str::to_string),
        path: path.to_string(),
        tag,
        digest,
    })
}

/// True for a bare 64-character lowercase hex string, which Docker reads as
/// an image ID and refuses as a repository name.
fn is_image_id(s: &str) -> bool {
    s.len() == 64 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// Splits a name into (domain, path, byte offset of the path) with Docker's
/// `splitDockerDomain` rule: the first of several `/`-separated components
/// is a domain when it contains `.` or `:`, is `localhost`, or contains an
/// uppercase letter. A name without `/` is always a path.
fn split_domain(name: &str) -> (Option<&str>, &str, usize) {
    match name.split_once('/') {
        Some((first, rest)) if looks_like_domain(first) => (Some(first), rest, first.len() + 1),
        _ => (None, name, 0),
    }
}

fn looks_like_domain(component: &str) -> bool {
    component.contains(['.', ':'])
        || component == "localhost"
        || component.chars().any(char::is_uppercase)
}

/// Checks `host[:port]` where host is a DNS-like name or a bracketed IPv6
/// address. The domain always starts at offset 0 of the input.
fn check_domain(domain: &str) -> Check<()> {
    if !domain.starts_with('[') {
        if let Some((index, _)) = domain.match_indices(':').nth(1) {
            return Err(Problem::new(
                index,
                "registry host has more than one ':'; write IPv6 addresses in brackets, like [::1]:5000",
            ));
        }
    }

    let host_end = if domain.starts_with('[') {
        check_ipv6_host(domain)?
    } else {
        let host_end = domain.find(':').unwrap_or(domain.len());
        check_host_name(&domain[..host_end])?;
        host_end
    };

    let rest = &domain[host_end..];
    let Some(port) = rest.strip_prefix(':') else {
        return match rest.chars().next() {
            None => Ok(()),
            Some(c) => Err(Problem::new(
                host_end,
                format!("unexpected {c:?} after the IPv6 address; expected ':port' or '/'"),
            )),
        };
    };
    if port.is_empty() {
        return Err(Problem::new(host_end + 1, "registry port is empty"));
    }
    if let Some((index, c)) = port.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        return Err(Problem::new(
            host_end + 1 + index,
            format!("registry port must be digits, found {c:?}"),
        ));
    }
    Ok(())
}

/// Checks `[hex and colons]` at the start of `domain` and returns the byte
/// offset just past the `]`.
fn check_ipv6_host(domain: &str) -> Check<usize> {
    let Some(close) = domain.find(']') else {
        return Err(Problem::new(0, "IPv6 address has no closing ']'"));
    };
    let address = &domain[1..close];
    if address.is_empty() {
        return Err(Problem::new(1, "IPv6 address between '[' and ']' is empty"));
    }
    if let Some((index, c)) = address
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_hexdigit() || *c == ':'))
    {
        return Err(Problem::new(
            1 + index,
            format!("IPv6 address contains invalid character {c:?}"),
        ));
    }
    Ok(close + 1)
}

/// Checks labels `[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]` joined
/// by `.`. The host starts at offset 0 of the input.
fn check_host_name(host: &str) -> Check<()> {
    if host.is_empty() {
        return Err(Problem::new(0, "registry host is empty"));
    }
    let mut label_start = 0;
    for label in host.split('.') {
        if label.is_empty() {
            return Err(Problem::new(
                label_start,
                "registry host has an empty label (look for '..' or a leading or trailing '.')",
            ));
        }
        if let Some((index, c)) = label
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '-'))
        {
            return Err(Problem::new(
                label_start + index,
                format!("registry host contains invalid character {c:?}"),
            ));
        }
        if label.starts_with('-') {
            return Err(Problem::new(
                label_start,
                format!("registry host label {label:?} starts with '-'"),
            ));
        }
        if label.ends_with('-') {
            return Err(Problem::new(
                label_start + label.len() - 1,
                format!("registry host label {label:?} ends with '-'"),
            ));
        }
        label_start += label.len() + 1;
    }
    Ok(())
}

/// Checks path components joined by `/`; `start` is the path's offset.
fn check_path(path: &str, start: usize) -> Check<()> {
    if path.is_empty() {
        let reason = if start == 0 {
            "repository name is empty"
        } else {
            "repository path after the registry is empty"
        };
        return Err(Problem::new(start, reason));
    }
    let last = path.split('/').count() - 1;
    let mut component_start = start;
    for (index, component) in path.split('/').enumerate() {
        if component.is_empty() {
            return Err(if index == 0 {
                Problem::new(component_start, "repository name starts with '/'")
            } else if index == last {
                Problem::new(component_start - 1, "repository name ends with '/'")
            } else {
                Problem::new(component_start, "repository name contains '//'")
            });
        }
        check_path_component(component, component_start)?;
        component_start += component.len() + 1;
    }
    Ok(())
}

/// Checks one component `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`; `start` is
/// its offset.
fn check_path_component(component: &str, start: usize) -> Check<()> {
    // The separator run seen since the last letter or digit, and its offset.
    let mut separator = String::new();
    let mut separator_start = start;
    for (index, c) in component.char_indices() {
        let offset = start + index;
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            if !separator.is_empty() && !is_valid_separator(&separator) {
                return Err(Problem::new(
                    separator_start,
                    format!(
                        "repository name has separator {separator:?}; only '.', '_', '__' or dashes may join letters and digits"
                    ),
                ));
            }
            separator.clear();
        } else if matches!(c, '.' | '_' | '-') {
            if index == 0 {
                return Err(Problem::new(
                    offset,
                    format!(
                        "repository name component must start with a lowercase letter or digit, not {c:?}"
                    ),
                ));
            }
            if separator.is_empty() {
                separator_start = offset;
            }
            separator.push(c);
        } else if c.is_ascii_uppercase() {
            return Err(Problem::new(offset, "repository name must be lowercase"));
        } else {
            return Err(Problem::new(
                offset,
                format!("repository name contains invalid character {c:?}"),
            ));
        }
    }
    if !separator.is_empty() {
        return Err(Problem::new(
            separator_start,
            format!(
                "repository name component {component:?} must end with a lowercase letter or digit"
            ),
        ));
    }
    Ok(())
}

fn is_valid_separator(separator: &str) -> bool {
    matches!(separator, "." | "_" | "__") || separator.chars().all(|c| c == '-')
}

/// Checks `[\w][\w.-]{0,127}`; `start` is the tag's offset.
fn check_tag(tag: &str, start: usize) -> Check<()> {
    let mut chars = tag.char_indices();
    let Some((_, first)) = chars.next() else {
        return Err(Problem::new(start, "tag is empty"));
    };
    if !is_word_char(first) {
        return Err(Problem::new(
            start,
            format!("tag must start with a letter, digit or '_', not {first:?}"),
        ));
    }
    if let Some((index, c)) = chars.find(|(_, c)| !(is_word_char(*c) || *c == '.' || *c == '-')) {
        return Err(Problem::new(
            start + index,
            format!("tag contains invalid character {c:?}"),
        ));
    }
    // Every character is ASCII here, so bytes are characters.
    if tag.len() > TAG_MAX_LEN {
        return Err(Problem::new(
            start + TAG_MAX_LEN,
            format!(
                "tag is longer than {TAG_MAX_LEN} characters (it has {})",
                tag.len()
            ),
        ));
    }
    Ok(())
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Checks `algorithm:encoded`; `start` is the digest's offset.
fn check_digest(digest: &str, start: usize) -> Check<Digest> {
    if digest.is_empty() {
        return Err(Problem::new(start, "digest is empty"));
    }
    let Some((algorithm, encoded)) = digest.split_once(':') else {
        return Err(Problem::new(
            start,
            format!("digest {digest:?} has no ':' between algorithm and hex"),
        ));
    };
    check_digest_algorithm(algorithm, start)?;
    check_digest_encoded(digest, algorithm, encoded, start + algorithm.len() + 1)?;
    Ok(Digest {
        algorithm: algorithm.to_string(),
        hex: encoded.to_string(),
    })
}

/// Checks `[a-z0-9]+([+._-][a-z0-9]+)*`; `start` is the algorithm's offset.
fn check_digest_algorithm(algorithm: &str, start: usize) -> Check<()> {
    if algorithm.is_empty() {
        return Err(Problem::new(start, "digest algorithm is empty"));
    }
    // True at the start so that a leading separator is rejected.
    let mut after_separator = true;
    for (index, c) in algorithm.char_indices() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            after_separator = false;
        } else if matches!(c, '+' | '.' | '_' | '-') {
            if after_separator {
                return Err(Problem::new(
                    start + index,
                    format!("digest algorithm {algorithm:?} has a misplaced separator {c:?}"),
                ));
            }
            after_separator = true;
        } else {
            return Err(Problem::new(
                start + index,
                format!("digest algorithm {algorithm:?} contains invalid character {c:?}"),
            ));
        }
    }
    if after_separator {
        return Err(Problem::new(
            start + algorithm.len() - 1,
            format!("digest algorithm {algorithm:?} ends with a separator"),
        ));
    }
    Ok(())
}

/// The exact number of lowercase hex characters a known algorithm needs.
fn known_hex_len(algorithm: &str) -> Option<usize> {
    match algorithm {
        "sha256" => Some(64),
        "sha512" => Some(128),
        _ => None,
    }
}

/// Checks the part after `:`; `start` is its offset.
fn check_digest_encoded(digest: &str, algorithm: &str, encoded: &str, start: usize) -> Check<()> {
    match known_hex_len(algorithm) {
        Some(needed) => {
            if let Some((index, c)) = encoded
                .char_indices()
                .find(|(_, c)| !matches!(c, '0'..='9' | 'a'..='f'))
            {
                return Err(Problem::new(
                    start + index,
                    format!("digest {digest:?} contains {c:?}, which is not lowercase hex"),
                ));
            }
            if encoded.len() != needed {
                return Err(Problem::new(
                    start,
                    format!(
                        "digest {digest:?} has {} hex characters, {algorithm} needs {needed}",
                        encoded.len()
                    ),
                ));
            }
        }
        None => {
            if encoded.is_empty() {
                return Err(Problem::new(
                    start,
                    format!("digest {digest:?} has nothing after the ':'"),
                ));
            }
            if let Some((index, c)) = encoded
                .char_indices()
                .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '=' | '_' | '-')))
            {
                return Err(Problem::new(
                    start + index,
                    format!("digest {digest:?} contains invalid character {c:?}"),
                ));
            }
        }
    }
    Ok(())
}

/// A digest of an image repository, whatever spelling named it: what a signature is checked
/// for, or an age is known for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subject {
    /// `registry/path`, as [`Reference::canonical_name`] spells it.
    pub image: String,
    pub digest: String,
}

impl Subject {
    pub fn of(reference: &Reference, digest: &Digest) -> Subject {
        Subject {
            image: reference.canonical_name(),
            digest: digest.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEX_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const HEX_B: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parse(s: &str) -> Reference {
        match Reference::parse(s) {
            Ok(reference) => reference,
            Err(error) => panic!("{error}"),
        }
    }

    fn parse_err(s: &str) -> ParseError {
        match Reference::parse(s) {
            Ok(reference) => panic!("{s:?} parsed as {reference:?}"),
            Err(error) => error,
        }
    }

    fn digest_err(s: &str) -> ParseError {
        match Digest::parse(s) {
            Ok(digest) => panic!("{s:?} parsed as {digest:?}"),
            Err(error) => error,
        }
    }

    fn digest(hex: &str) -> Digest {
        match Digest::from_sha256_hex(hex) {
            Ok(digest) => digest,
            Err(error) => panic!("{error}"),
        }
    }

    /// Asserts the whole message, so the wording users see is pinned.
    fn assert_error(input: &str, reason: &str, offset: usize) {
        let error = parse_err(input);
        assert_eq!(
            error.to_string(),
            format!("invalid image reference {input:?}: {reason} (at offset {offset})")
        );
        assert_eq!(error.input(), input);
        assert_eq!(error.reason(), reason, "{input:?}");
        assert_eq!(error.offset(), offset, "{input:?}");
    }

    // --- normalization ---

    /// Docker's normalization, one reference a row: the registry domain, the repository and
    /// the tag it names. Not formatted, so that each row stays one line.
    #[rustfmt::skip]
    const NAMES: &[(&str, &str, &str, Option<&str>)] = &[
        // A bare name is an official Docker Hub image; docker.io and index.docker.io spell
        // the same.
        ("nginx", "docker.io", "library/nginx", None),
        ("docker.io/nginx", "docker.io", "library/nginx", None),
        ("index.docker.io/nginx", "docker.io", "library/nginx", None),
        // An explicit library prefix is kept as is; a user's repository gets none.
        ("docker.io/library/nginx", "docker.io", "library/nginx", None),
        ("docker.io/acme/web", "docker.io", "acme/web", None),
        ("acme/web", "docker.io", "acme/web", None),
        // localhost as the first component is a domain, with or without a port...
        ("localhost/foo", "localhost", "foo", None),
        ("localhost:5000/foo", "localhost:5000", "foo", None),
        // ... but a name without '/' is never a domain (Docker's rule).
        ("localhost:5000", "docker.io", "library/localhost", Some("5000")),
        // An uppercase first component is a domain; a dashed one without a dot is a path.
        ("MyRegistry/app", "MyRegistry", "app", None),
        ("my-org/app", "docker.io", "my-org/app", None),
        // Another registry keeps a single-component path.
        ("registry.example.com/app:v1", "registry.example.com", "app", Some("v1")),
        // Docker does not treat the API host as a Docker Hub alias either.
        ("registry-1.docker.io/library/nginx", "registry-1.docker.io", "library/nginx", None),
        // An underscore in the path is valid.
        ("quay.io/k_nakajima/nginx-sample:latest", "quay.io", "k_nakajima/nginx-sample", Some("latest")),
        // IP addresses, IPv6 in brackets, with a port or without.
        ("[::1]:5000/foo/bar:v1", "[::1]:5000", "foo/bar", Some("v1")),
        ("[2001:db8::1]/app", "[2001:db8::1]", "app", None),
        ("10.0.0.1:5000/app:v2", "10.0.0.1:5000", "app", Some("v2")),
    ];

    #[test]
    fn references_name_their_domain_repository_and_tag() {
        for &(input, domain, repository, tag) in NAMES {
            let r = parse(input);
            assert_eq!(
                (r.domain(), r.repository().as_str(), r.tag()),
                (domain, repository, tag),
                "{input}"
            );
        }
    }

    #[test]
    fn docker_hub_is_asked_at_its_api_host_and_any_other_registry_at_its_domain() {
        for (input, api_host) in [
            ("nginx", "registry-1.docker.io"),
            ("docker.io/nginx", "registry-1.docker.io"),
            ("index.docker.io/nginx", "registry-1.docker.io"),
            ("localhost/foo", "localhost"),
            ("localhost:5000/foo", "localhost:5000"),
            ("registry.example.com/app:v1", "registry.example.com"),
            ("quay.io/k_nakajima/nginx-sample:latest", "quay.io"),
            ("[::1]:5000/foo/bar:v1", "[::1]:5000"),
        ] {
            assert_eq!(parse(input).api_host(), api_host, "{input}");
        }
    }

    #[test]
    fn path_separators_dot_underscores_and_dashes_are_accepted() {
        for s in ["a.b", "a_b", "a__b", "a-b", "a---b", "a.b_c-d__e"] {
            assert_eq!(parse(s).repository(), format!("library/{s}"));
        }
    }

    #[test]
    fn tag_and_digest_are_both_kept() {
        let r = parse(&format!("nginx:1.27@sha256:{HEX_A}"));
        assert_eq!(r.tag(), Some("1.27"));
        assert_eq!(r.digest(), Some(&digest(HEX_A)));
        assert!(!r.is_digest_only());
    }

    #[test]
    fn effective_tag_is_latest_when_nothing_is_written() {
        let r = parse("nginx");
        assert_eq!(r.tag(), None);
        assert_eq!(r.effective_tag(), Some("latest"));
    }

    #[test]
    fn effective_tag_is_the_written_tag() {
        assert_eq!(parse("nginx:1.27").effective_tag(), Some("1.27"));
    }

    #[test]
    fn digest_only_reference_has_no_effective_tag() {
        let r = parse(&format!("nginx@sha256:{HEX_A}"));
        assert!(r.is_digest_only());
        assert_eq!(r.tag(), None);
        assert_eq!(r.effective_tag(), None);
    }

    #[test]
    fn display_round_trips_the_users_spelling() {
        for s in [
            "nginx",
            "docker.io/nginx",
            "index.docker.io/nginx:1",
            "localhost:5000/a/b:v1",
            "[::1]:5000/foo",
            "MyRegistry/app",
            "quay.io/k_nakajima/nginx-sample:latest",
            &format!("ghcr.io/org/app:v1@sha256:{HEX_A}"),
            &format!("nginx@sha256:{HEX_A}"),
        ] {
            assert_eq!(parse(s).to_string(), s);
        }
    }

    #[test]
    fn from_str_matches_parse() {
        let r: Reference = match "nginx:1".parse() {
            Ok(r) => r,
            Err(error) => panic!("{error}"),
        };
        assert_eq!(r, parse("nginx:1"));
    }

    #[test]
    fn different_spellings_are_different_references_with_one_canonical_name() {
        let short = parse("nginx");
        let long = parse("docker.io/library/nginx");
        assert_ne!(short, long);
        assert_eq!(short.canonical_name(), long.canonical_name());
        for (spelling, canonical) in [
            ("nginx", "docker.io/library/nginx"),
            ("library/nginx", "docker.io/library/nginx"),
            ("docker.io/nginx", "docker.io/library/nginx"),
            ("docker.io/library/nginx", "docker.io/library/nginx"),
            ("index.docker.io/library/nginx", "docker.io/library/nginx"),
            ("registry-1.docker.io/nginx", "docker.io/library/nginx"),
            ("docker.io:443/library/nginx", "docker.io/library/nginx"),
            ("acme/web", "docker.io/acme/web"),
            ("docker.io/acme/web", "docker.io/acme/web"),
            ("index.docker.io/acme/web", "docker.io/acme/web"),
            ("registry-1.docker.io/acme/web", "docker.io/acme/web"),
            ("localhost/foo", "localhost/foo"),
            ("LOCALHOST:5000/sig/app", "localhost:5000/sig/app"),
            ("registry.example.com/app:v1", "registry.example.com/app"),
            (
                "Registry.Example.com:443/team/app",
                "registry.example.com/team/app",
            ),
        ] {
            assert_eq!(parse(spelling).canonical_name(), canonical, "{spelling}");
        }
    }

    #[test]
    fn name_of_exactly_255_characters_is_accepted() {
        let name = format!("example.com/{}", "a".repeat(255 - "example.com/".len()));
        assert_eq!(parse(&name).to_string(), name);
    }

    #[test]
    fn tag_of_exactly_128_characters_is_accepted() {
        let tag = "t".repeat(128);
        assert_eq!(parse(&format!("nginx:{tag}")).tag(), Some(tag.as_str()));
    }

    // --- with_digest ---

    #[test]
    fn with_digest_pins_the_name_and_tag_as_written() {
        let old = format!("@sha256:{HEX_A}");
        for (input, expected) in [
            // The implied latest tag is made explicit.
            ("nginx".to_string(), "nginx:latest"),
            // An existing digest is replaced.
            (format!("nginx:1.27{old}"), "nginx:1.27"),
            // The registry's port and the path are kept.
            ("localhost:5000/a/b:v1".to_string(), "localhost:5000/a/b:v1"),
            // Docker Hub names are never expanded.
            ("docker.io/nginx:1".to_string(), "docker.io/nginx:1"),
            (
                "index.docker.io/acme/web".to_string(),
                "index.docker.io/acme/web:latest",
            ),
            // A digest-only reference gets no tag.
            (format!("nginx{old}"), "nginx"),
        ] {
            assert_eq!(
                parse(&input).with_digest(&digest(HEX_B)),
                format!("{expected}@sha256:{HEX_B}"),
                "{input}"
            );
        }
    }

    // --- digests ---

    #[test]
    fn digest_parse_accepts_sha256() {
        let d = match Digest::parse(&format!("sha256:{HEX_B}")) {
            Ok(d) => d,
            Err(error) => panic!("{error}"),
        };
        assert_eq!(d.algorithm(), "sha256");
        assert_eq!(d.hex(), HEX_B);
        assert_eq!(d.to_string(), format!("sha256:{HEX_B}"));
    }

    #[test]
    fn digest_parse_accepts_sha512_of_128_hex() {
        let hex = HEX_B.repeat(2);
        let d = Digest::parse(&format!("sha512:{hex}"));
        assert_eq!(d.map(|d| d.hex().to_string()), Ok(hex));
    }

    #[test]
    fn digest_parse_accepts_other_algorithms_with_oci_grammar() {
        let d = Digest::parse("multihash+base58:QmRZxt2b1FVZPNqd8hsiykDL3TdBDeTSPX9Kv46HmX4Gx8");
        assert_eq!(
            d.map(|d| d.algorithm().to_string()),
            Ok("multihash+base58".to_string())
        );
    }

    #[test]
    fn digest_from_str_matches_parse() {
        let s = format!("sha256:{HEX_A}");
        assert_eq!(s.parse::<Digest>(), Digest::parse(&s));
    }

    #[test]
    fn digests_order_by_algorithm_then_hex() {
        assert!(digest(HEX_B) < digest(HEX_A));
    }

    #[test]
    fn from_sha256_hex_builds_a_sha256_digest() {
        let d = digest(HEX_A);
        assert_eq!(d.algorithm(), "sha256");
        assert_eq!(d.hex(), HEX_A);
    }

    #[test]
    fn from_sha256_hex_rejects_short_hex() {
        let error = match Digest::from_sha256_hex("abc") {
            Ok(d) => panic!("accepted {d}"),
            Err(error) => error,
        };
        assert_eq!(
            error.to_string(),
            "invalid digest \"sha256:abc\": digest \"sha256:abc\" has 3 hex characters, sha256 needs 64 (at offset 7)"
        );
    }

    #[test]
    fn digest_rejects_uppercase_hex() {
        let error = digest_err(&format!("sha256:{}", HEX_A.to_uppercase()));
        assert!(error
            .reason()
            .ends_with("contains 'A', which is not lowercase hex"));
        assert_eq!(error.offset(), 7);
    }

    #[test]
    fn digest_rejects_sha512_of_sha256_length() {
        let error = digest_err(&format!("sha512:{HEX_A}"));
        assert!(error
            .reason()
            .ends_with("has 64 hex characters, sha512 needs 128"));
    }

    #[test]
    fn digest_rejects_missing_colon() {
        assert_eq!(
            digest_err("sha256").to_string(),
            "invalid digest \"sha256\": digest \"sha256\" has no ':' between algorithm and hex (at offset 0)"
        );
    }

    #[test]
    fn digest_rejects_empty_algorithm() {
        let error = digest_err(&format!(":{HEX_A}"));
        assert_eq!(error.reason(), "digest algorithm is empty");
        assert_eq!(error.offset(), 0);
    }

    #[test]
    fn digest_rejects_uppercase_algorithm() {
        let error = digest_err(&format!("SHA256:{HEX_A}"));
        assert_eq!(
            error.reason(),
            "digest algorithm \"SHA256\" contains invalid character 'S'"
        );
    }

    #[test]
    fn digest_rejects_misplaced_algorithm_separator() {
        assert_eq!(
            digest_err("sha+:abc").reason(),
            "digest algorithm \"sha+\" ends with a separator"
        );
        assert_eq!(
            digest_err("+sha:abc").reason(),
            "digest algorithm \"+sha\" has a misplaced separator '+'"
        );
        assert_eq!(digest_err("sha++b:abc").offset(), 4);
    }

    #[test]
    fn digest_rejects_invalid_encoded_character_for_other_algorithms() {
        let error = digest_err("foo:ab/c");
        assert_eq!(
            error.reason(),
            "digest \"foo:ab/c\" contains invalid character '/'"
        );
        assert_eq!(error.offset(), 6);
    }

    #[test]
    fn digest_rejects_empty_input() {
        assert_eq!(digest_err("").reason(), "digest is empty");
    }

    // --- errors ---

    /// What a reference that is not one is refused for, and where: the input, the reason
    /// and its offset. Not formatted, so that each row stays one line.
    #[rustfmt::skip]
    const ERRORS: &[(&str, &str, usize)] = &[
        (" nginx", "contains whitespace ' '; image references have none", 0),
        ("nginx:1.0\n", "contains whitespace '\\n'; image references have none", 9),
        ("nginx :1", "contains whitespace ' '; image references have none", 5),
        ("Nginx:1.0", "repository name must be lowercase", 0),
        ("nginx:", "tag is empty", 6),
        (HEX_A, "a 64-character hex string is an image ID, not a repository name", 0),
        ("", "reference is empty", 0),
        ("ghcr.io/acme/Web", "repository name must be lowercase", 13),
        ("nginx:-rc1", "tag must start with a letter, digit or '_', not '-'", 6),
        ("nginx:1+2", "tag contains invalid character '+'", 7),
        ("nginx::1.0", "tag must start with a letter, digit or '_', not ':'", 6),
        ("localhost::5000/foo", "registry host has more than one ':'; write IPv6 addresses in brackets, like [::1]:5000", 10),
        ("::1/foo", "registry host has more than one ':'; write IPv6 addresses in brackets, like [::1]:5000", 1),
        ("[::1:5000/foo", "IPv6 address has no closing ']'", 0),
        ("[::g]/foo", "IPv6 address contains invalid character 'g'", 3),
        ("[::1]x/foo", "unexpected 'x' after the IPv6 address; expected ':port' or '/'", 5),
        ("localhost:50a0/foo", "registry port must be digits, found 'a'", 12),
        ("localhost:/foo", "registry port is empty", 10),
        ("example..com/foo", "registry host has an empty label (look for '..' or a leading or trailing '.')", 8),
        ("-example.com/foo", "registry host label \"-example\" starts with '-'", 0),
        ("exa_mple.com/foo", "registry host contains invalid character '_'", 3),
        ("acme/nginx/", "repository name ends with '/'", 10),
        ("/nginx", "repository name starts with '/'", 0),
        ("acme//nginx", "repository name contains '//'", 5),
        ("localhost:5000/", "repository path after the registry is empty", 15),
        (":1.0", "repository name is empty", 0),
        ("acme/a..b", "repository name has separator \"..\"; only '.', '_', '__' or dashes may join letters and digits", 6),
        ("acme/app-", "repository name component \"app-\" must end with a lowercase letter or digit", 8),
        ("acme/_app", "repository name component must start with a lowercase letter or digit, not '_'", 5),
        ("acme/ng!nx", "repository name contains invalid character '!'", 7),
        ("ngïnx", "repository name contains invalid character 'ï'", 2),
        ("nginx@", "digest is empty", 6),
        ("nginx@sha256:abc", "digest \"sha256:abc\" has 3 hex characters, sha256 needs 64", 13),
    ];

    #[test]
    fn every_error_names_its_reason_and_offset() {
        for &(input, reason, offset) in ERRORS {
            assert_error(input, reason, offset);
        }
    }

    #[test]
    fn error_tag_longer_than_128_characters() {
        let input = format!("nginx:{}", "t".repeat(129));
        assert_error(
            &input,
            "tag is longer than 128 characters (it has 129)",
            6 + 128,
        );
    }

    #[test]
    fn error_name_longer_than_255_characters() {
        let input = format!("example.com/{}:v1", "a".repeat(250));
        assert_error(
            &input,
            "name is longer than 255 characters (it has 262)",
            255,
        );
    }

    #[test]
    fn error_triple_underscore_separator_in_path() {
        assert!(parse_err("a___b").reason().contains("separator \"___\""));
    }

    #[test]
    fn error_second_at_sign() {
        assert_error(
            &format!("nginx@sha256:{HEX_A}@x"),
            &format!("digest \"sha256:{HEX_A}@x\" contains '@', which is not lowercase hex"),
            77,
        );
    }

    // --- properties ---

    /// A domain that Docker's rule recognizes as one.
    fn domain_strategy() -> impl Strategy<Value = String> {
        let base = prop_oneof![
            Just("localhost".to_string()),
            Just("docker.io".to_string()),
            Just("index.docker.io".to_string()),
            "[a-zA-Z0-9]([a-zA-Z0-9-]{0,4}[a-zA-Z0-9])?(\\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,4}[a-zA-Z0-9])?){1,3}",
            "[A-Z][a-zA-Z0-9]{0,5}",
            // Docker only recognizes a bracketed IPv6 domain by its ':'.
            "\\[[a-fA-F0-9]{0,4}:[a-fA-F0-9:]{0,10}\\]",
        ];
        let with_optional_port =
            (base, proptest::option::of("[0-9]{1,5}")).prop_map(|(host, port)| match port {
                Some(port) => format!("{host}:{port}"),
                None => host,
            });
        let plain_host_with_port =
            ("[a-z0-9]{1,6}", "[0-9]{1,5}").prop_map(|(host, port)| format!("{host}:{port}"));
        prop_oneof![with_optional_port, plain_host_with_port]
    }

    fn path_strategy() -> impl Strategy<Value = String> {
        let component = "[a-z0-9]{1,4}(([._]|__|-{1,3})[a-z0-9]{1,4}){0,2}";
        proptest::collection::vec(component, 1..=3).prop_map(|components| components.join("/"))
    }

    /// (domain, path, tag, digest) parts of a valid reference.
    type Parts = (Option<String>, String, Option<String>, Option<String>);

    fn parts_strategy() -> impl Strategy<Value = Parts> {
        (
            proptest::option::of(domain_strategy()),
            path_strategy(),
            proptest::option::of("[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127}"),
            proptest::option::of("[0-9a-f]{64}".prop_map(|hex| format!("sha256:{hex}"))),
        )
            .prop_map(|(domain, path, tag, digest)| {
                // Without a domain, a first component with '.' followed by
                // '/' would be read as a domain (Docker's rule), so use '_'.
                let path = match (&domain, path.split_once('/')) {
                    (None, Some((first, rest))) => format!("{}/{rest}", first.replace('.', "_")),
                    _ => path,
                };
                (domain, path, tag, digest)
            })
    }

    fn assemble(parts: &Parts) -> String {
        let (domain, path, tag, digest) = parts;
        let mut s = String::new();
        if let Some(domain) = domain {
            s.push_str(domain);
            s.push('/');
        }
        s.push_str(path);
        if let Some(tag) = tag {
            s.push(':');
            s.push_str(tag);
        }
        if let Some(digest) = digest {
            s.push('@');
            s.push_str(digest);
        }
        s
    }

    fn new_digest_strategy() -> impl Strategy<Value = Digest> {
        prop_oneof![
            "[0-9a-f]{64}".prop_map(|hex| Digest {
                algorithm: "sha256".to_string(),
                hex
            }),
            "[0-9a-f]{128}".prop_map(|hex| Digest {
                algorithm: "sha512".to_string(),
                hex
            }),
        ]
    }

    proptest! {
        #[test]
        fn valid_references_round_trip_through_display(parts in parts_strategy()) {
            let s = assemble(&parts);
            let r = Reference::parse(&s);
            prop_assert!(r.is_ok(), "{:?} rejected: {:?}", s, r);
            let r = parse(&s);
            prop_assert_eq!(r.to_string(), s.clone());
            prop_assert_eq!(Reference::parse(&r.to_string()), Ok(r.clone()));

            let (domain, _, tag, digest) = &parts;
            prop_assert_eq!(r.tag(), tag.as_deref());
            prop_assert_eq!(r.digest().map(Digest::to_string), digest.clone());
            prop_assert_eq!(&r.domain, domain);
        }

        #[test]
        fn parse_never_panics_and_valid_input_round_trips(s in "\\PC{0,40}") {
            if let Ok(r) = Reference::parse(&s) {
                prop_assert_eq!(r.to_string(), s);
            }
        }

        #[test]
        fn parse_never_panics_on_reference_alphabet(s in "[a-zA-Z0-9.:/@_\\[\\]+=-]{0,40}") {
            match Reference::parse(&s) {
                Ok(r) => prop_assert_eq!(r.to_string(), s),
                Err(error) => prop_assert!(error.offset() <= s.len()),
            }
        }

        #[test]
        fn digest_parse_never_panics(s in "\\PC{0,80}") {
            if let Ok(d) = Digest::parse(&s) {
                prop_assert_eq!(d.to_string(), s);
            }
        }

        #[test]
        fn with_digest_output_parses_back_to_the_same_image(
            parts in parts_strategy(),
            new_digest in new_digest_strategy(),
        ) {
            let r = parse(&assemble(&parts));
            let pinned_text = r.with_digest(&new_digest);
            let pinned = Reference::parse(&pinned_text);
            prop_assert!(pinned.is_ok(), "{:?} rejected: {:?}", pinned_text, pinned);
            let pinned = parse(&pinned_text);
            prop_assert_eq!(pinned.domain(), r.domain());
            prop_assert_eq!(pinned.repository(), r.repository());
            prop_assert_eq!(pinned.effective_tag(), r.effective_tag());
            prop_assert_eq!(pinned.digest(), Some(&new_digest));
            prop_assert_eq!(&pinned.domain, &r.domain);
        }
    }
}
