//! What a registry said about an image, as the pure core reasons about it: the key a pass asks
//! by, the digest a tag resolved to, and why it could not be resolved. The registry adapter
//! (`crate::registry`) produces these; planning, policies and sync's decisions read them
//! without knowing how they were asked.

use std::fmt;

use serde::Serialize;

use crate::reference::{Digest, Reference};

/// A failed registry operation. Every message names the image and the registry host.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error("{image}: registry {host} answered 401 Unauthorized: {hint}")]
    Unauthorized {
        image: String,
        host: String,
        hint: String,
    },
    #[error("{image}: registry {host} denied access (403 Forbidden){detail}")]
    Denied {
        image: String,
        host: String,
        detail: String,
    },
    #[error("{image}: not found at registry {host} (404{detail})")]
    NotFound {
        image: String,
        host: String,
        detail: String,
    },
    #[error("{image}: registry {host} is rate limiting requests (429 Too Many Requests){}", retry_hint(.retry_after))]
    RateLimited {
        image: String,
        host: String,
        retry_after: Option<String>,
    },
    #[error("{image}: registry {host} answered {status} (after {attempts} attempt(s))")]
    Status {
        image: String,
        host: String,
        status: u16,
        attempts: u32,
    },
    #[error("{image}: cannot reach registry {host}: {detail}")]
    Unreachable {
        image: String,
        host: String,
        detail: String,
    },
    #[error("{image}: registry {host} sent a manifest whose sha256 is {computed}, not the {claimed} it claimed; nothing was pinned")]
    DigestMismatch {
        image: String,
        host: String,
        claimed: String,
        computed: String,
    },
    #[error("{image}: registry {host}: {detail}")]
    BadResponse {
        image: String,
        host: String,
        detail: String,
    },
    /// A credential helper failed; `detail` names the helper and the registry.
    #[error("{image}: {detail}")]
    Credentials {
        image: String,
        host: String,
        detail: String,
    },
    #[error("registry client setup: {0}")]
    Setup(String),
}

fn retry_hint(retry_after: &Option<String>) -> String {
    match retry_after {
        Some(v) => format!("; Retry-After: {v}"),
        None => String::new(),
    }
}

/// What a tag points at now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    pub digest: Digest,
    pub kind: ManifestKind,
    pub media_type: String,
}

/// One distinct thing to resolve: registry host, repository and tag (or digest).
///
/// `nginx`, `docker.io/library/nginx:latest` and `index.docker.io/nginx` share one key, so a
/// pass asks the registry once for all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ResolveKey {
    pub domain: String,
    pub repository: String,
    /// The tag, or the digest for a digest-only reference.
    pub reference: String,
}

impl ResolveKey {
    pub fn of(r: &Reference) -> ResolveKey {
        let reference = match (r.effective_tag(), r.digest()) {
            (Some(tag), _) => tag.to_string(),
            (None, Some(d)) => d.to_string(),
            (None, None) => "latest".to_string(),
        };
        ResolveKey {
            domain: r.domain().to_string(),
            repository: r.repository(),
            reference,
        }
    }
}

impl fmt::Display for ResolveKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = if self.reference.contains(':') {
            '@'
        } else {
            ':'
        };
        write!(
            f,
            "{}/{}{}{}",
            self.domain, self.repository, sep, self.reference
        )
    }
}

/// Index (multi-platform) or single image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ManifestKind {
    Index,
    Image,
}

/// The result of resolving one reference.
pub type ResolveResult = Result<Resolved, RegistryError>;
