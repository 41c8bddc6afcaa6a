//! Who may see what on the dashboard (`--ui-auth`). In operator mode a viewer sees the
//! `PinnedRepository` objects Kubernetes RBAC lets them `get`, namespace by namespace, and no
//! other's name: `token` reviews the request's bearer token with a TokenReview, `proxy` trusts
//! an authenticating proxy's user and group headers (as oauth2-proxy sends them); both then ask
//! a SubjectAccessReview per namespace. `none` shows everything (`tagpin run`, one team; the
//! operator only with `--ui-allow-anonymous`). Answers are kept briefly, in bounded caches.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderName};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

use super::board::Visible;
use crate::mutex::lock;

/// How long a review's answer is kept.
pub(crate) const REVIEW_TTL: Duration = Duration::from_secs(10);

/// Answers kept per cache; past this, the cache starts over.
pub(crate) const MAX_CACHED: usize = 4096;

/// The group of `PinnedRepository`, as a SubjectAccessReview names it.
pub(crate) const GROUP: &str = "tagpin.dev";
pub(crate) const RESOURCE: &str = "pinnedrepositories";

/// `--ui-auth`: how the dashboard knows its viewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// A bearer token, checked with a TokenReview.
    Token,
    /// An authenticating proxy's user and group headers.
    Proxy,
    /// No check: everyone who reaches the listener sees everything.
    None,
}

/// How the dashboard knows its viewer.
pub enum UiAuth {
    /// Everyone sees everything.
    None,
    /// A bearer token, reviewed.
    Token(Reviewer),
    /// An authenticating proxy's headers.
    Proxy {
        user: HeaderName,
        groups: HeaderName,
        reviewer: Reviewer,
    },
}

/// A viewer refused: no credentials, or credentials the cluster does not accept.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("no credentials: send a bearer token")]
    NoToken,
    #[error("no user header from the authenticating proxy")]
    NoUser,
    #[error("the token was not accepted")]
    NotAuthenticated,
    #[error("cannot review the credentials now: {0}")]
    Review(String),
}

/// Who the cluster says the viewer is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Viewer {
    pub user: String,
    pub groups: Vec<String>,
}

/// Answers kept, with when they were given.
type Cache<K, V> = Mutex<BTreeMap<K, (Instant, V)>>;

/// Asks the home cluster about tokens and access, keeping answers for [`REVIEW_TTL`].
pub struct Reviewer {
    client: kube::Client,
    /// By the SHA-256 of the token: the token itself is never kept.
    tokens: Cache<[u8; 32], Option<Viewer>>,
    access: Cache<(Viewer, String), bool>,
}

fn cached<K: Ord + Clone, V: Clone>(cache: &Cache<K, V>, key: &K) -> Option<V> {
    let cache = lock(cache);
    let (at, value) = cache.get(key)?;
    (at.elapsed() < REVIEW_TTL).then(|| value.clone())
}

fn keep<K: Ord, V>(cache: &Cache<K, V>, key: K, value: V) {
    let mut cache = lock(cache);
    if cache.len() >= MAX_CACHED {
        cache.retain(|_, (at, _)| at.elapsed() < REVIEW_TTL);
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
    }
    cache.insert(key, (Instant::now(), value));
}

impl Reviewer {
    /// Reviews with `client`, a client of the cluster the operator runs in.
    pub fn new(client: kube::Client) -> Reviewer {
        Reviewer {
            client,
            tokens: Mutex::default(),
            access: Mutex::default(),
        }
    }

    /// Who `token` belongs to (a TokenReview), `None` when it is not accepted.
    async fn review_token(&self, token: &str) -> Result<Option<Viewer>, Refused> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(known) = cached(&self.tokens, &key) {
            return Ok(known);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = self.review(&review).await?;
        let status = answer.status.unwrap_or_default();
        let viewer = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Some(Viewer {
                user: user.username.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
            }),
            _ => None,
        };
        keep(&self.tokens, key, viewer.clone());
        Ok(viewer)
    }

    /// Asks the API server for a review (a TokenReview, a SubjectAccessReview): its answer is
    /// the object it returns, with its status filled in.
    async fn review<K>(&self, review: &K) -> Result<K, Refused>
    where
        K: kube::Resource<Scope = kube::core::ClusterResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.client.clone());
        api.create(&PostParams::default(), review)
            .await
            .map_err(|e| Refused::Review(e.to_string()))
    }

    /// Whether `viewer` may `get pinnedrepositories` in `namespace` (a SubjectAccessReview).
    async fn may_read(&self, viewer: &Viewer, namespace: &str) -> Result<bool, Refused> {
        let key = (viewer.clone(), namespace.to_string());
        if let Some(known) = cached(&self.access, &key) {
            return Ok(known);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(viewer.user.clone()),
                groups: Some(viewer.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_string()),
                    verb: Some("get".into()),
                    group: Some(GROUP.into()),
                    resource: Some(RESOURCE.into()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = self.review(&review).await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        keep(&self.access, key, allowed);
        Ok(allowed)
    }

    /// The namespaces of `namespaces` that `viewer` may read.
    async fn visible(
        &self,
        viewer: &Viewer,
        namespaces: BTreeSet<String>,
    ) -> Result<Visible, Refused> {
        let mut allowed = BTreeSet::new();
        for namespace in namespaces {
            if self.may_read(viewer, &namespace).await? {
                allowed.insert(namespace);
            }
        }
        Ok(Visible::Namespaces(allowed))
    }
}

/// The bearer token of an `Authorization` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// The groups of a proxy's header: comma-separated (oauth2-proxy), repeated headers too.
fn groups_of(headers: &HeaderMap, name: &HeaderName) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect()
}

impl UiAuth {
    /// What the viewer of a request with `headers` may see, of the repositories in
    /// `namespaces`.
    pub async fn visible(
        &self,
        headers: &HeaderMap,
        namespaces: BTreeSet<String>,
    ) -> Result<Visible, Refused> {
        match self {
            UiAuth::None => Ok(Visible::All),
            UiAuth::Token(reviewer) => {
                let token = bearer(headers).ok_or(Refused::NoToken)?;
                let viewer = reviewer
                    .review_token(token)
                    .await?
                    .ok_or(Refused::NotAuthenticated)?;
                reviewer.visible(&viewer, namespaces).await
            }
            UiAuth::Proxy {
                user,
                groups,
                reviewer,
            } => {
                let name = headers
                    .get(user)
                    .and_then(|v| v.to_str().ok())
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .ok_or(Refused::NoUser)?;
                let viewer = Viewer {
                    user: name.to_string(),
                    groups: groups_of(headers, groups),
                };
                reviewer.visible(&viewer, namespaces).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_and_proxy_groups_are_read_as_sent() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert("authorization", "Bearer abc.def".parse().unwrap());
        assert_eq!(bearer(&headers), Some("abc.def"));
        headers.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer(&headers), None);
        let name = HeaderName::from_static("x-forwarded-groups");
        headers.append(&name, "team-a, team-b".parse().unwrap());
        headers.append(&name, "ops".parse().unwrap());
        assert_eq!(groups_of(&headers, &name), ["team-a", "team-b", "ops"]);
    }
}
