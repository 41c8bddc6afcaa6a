//! Lists, the one way tagpin reads objects: page by page, shared between the reconciles of
//! one identity when the cluster shares its lists, and remembered so that
//! [`Cluster::wait_for_change`] can watch what was read. Whole reads are retried when their
//! failure is transient ([`retrying`]).
//!
//! A list answers with a `kube::Error` rather than a [`ClusterError`]: what a 403 or a 404
//! means depends on what was listed (a kind not installed is "none" for GitOps objects, a
//! refusal is data for a verdict), so the caller decides, with [`Cluster::refused_or`] and
//! [`Cluster::failed`] to say it in tagpin's words.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use super::error::ClusterError;
use super::handle::Cluster;

/// Objects asked for per page: large enough for big namespaces in few requests, small enough
/// to keep each answer bounded.
const PAGE: u32 = 500;

/// The longest Retry-After a read honours before trying again.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// Attempts of one read when the API server fails transiently.
const READ_ATTEMPTS: u32 = 3;

/// A type of object a cluster lists, shares between reconciles and watches: what kube's typed
/// `Api` needs to read it, and a shared list needs to hand it to other tasks.
pub trait Listable:
    kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Listable for K where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A [`Listable`] type of namespaced object known at compile time (k8s-openapi's types).
pub trait Namespaced:
    Listable + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
{
}

impl<K> Namespaced for K where
    K: Listable + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
{
}

/// Whether [`Cluster::wait_for_change`] watches a list of objects once read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Watch it: a change to these objects ends the wait.
    Changes,
    /// Not watched: a change to these objects is seen at the next read only (`--wait` polls).
    No,
}

impl Cluster {
    /// Every object of type `K` in `namespace`, page by page (shared when this cluster shares
    /// its lists). [`Cluster::wait_for_change`] then watches them from where this list stands.
    pub async fn list<K: Namespaced>(&self, namespace: &str) -> Result<Vec<K>, kube::Error> {
        let api = Api::<K>::namespaced(self.client.clone(), namespace);
        let watch = Api::<K>::namespaced(self.watch_client.clone(), namespace);
        let (items, version) = self.shared(&api, watch).await?;
        if let Some(version) = version {
            self.remember(namespace, ApiResource::erase::<K>(&()), version);
        }
        Ok(items)
    }

    /// Every object of `resource` (a kind kube has no type for: Argo CD's, Flux's, Argo
    /// Rollouts', OpenShift's) in `namespace`, or in all namespaces when `None`, page by page
    /// (shared when this cluster shares its lists). A namespace's list is watched afterwards
    /// when `follow` says so.
    pub async fn list_objects(
        &self,
        namespace: Option<&str>,
        resource: &ApiResource,
        follow: Follow,
    ) -> Result<Vec<DynamicObject>, kube::Error> {
        let api = |client: &kube::Client| -> Api<DynamicObject> {
            match namespace {
                Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
                None => Api::all_with(client.clone(), resource),
            }
        };
        let (items, version) = self
            .shared(&api(&self.client), api(&self.watch_client))
            .await?;
        if let (Some(namespace), Some(version), Follow::Changes) = (namespace, version, follow) {
            self.remember(namespace, resource.clone(), version);
        }
        Ok(items)
    }

    /// What `derive` makes of lists (converted for the judge, indexed), shared as the lists
    /// are: with a thousand objects verified in one namespace, each reconcile would otherwise
    /// copy, convert and search the whole namespace again, and the fleet's cost would grow
    /// with objects × namespace size. Made once per list age by the reconciles of this
    /// identity, and kept while the lists it was made of are current ([`SharedLists`]); made
    /// afresh each time when this cluster does not share its lists. `key` names the view (its
    /// lists and namespace); the type of the view is part of it too.
    ///
    /// [`SharedLists`]: super::SharedLists
    pub async fn shared_view<T, F, Fut>(&self, key: &str, derive: F) -> Result<Arc<T>, kube::Error>
    where
        T: Send + Sync + 'static,
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        match &self.shared_lists {
            None => derive().await.map(Arc::new),
            Some(lists) => {
                let key = format!("view {key}");
                lists
                    .get_or_derive(&key, || async { derive().await.map(Arc::new) })
                    .await
            }
        }
    }

    /// Every item of the list `api` reads, and its resourceVersion, shared when this cluster
    /// shares its lists: kept current by a watch through `watch` (the same list on the watch
    /// client) from the list's resourceVersion.
    async fn shared<K: Listable>(
        &self,
        api: &Api<K>,
        watch: Api<K>,
    ) -> Result<(Vec<K>, Option<String>), kube::Error> {
        match &self.shared_lists {
            None => list_pages(api).await,
            Some(lists) => {
                let read = || async {
                    match list_pages(api).await {
                        Ok((items, version)) => Ok((Ok((items, version.clone())), version)),
                        // Not served (a GitOps tool not installed) or refused: an answer as
                        // well, shared for the age (there is nothing to watch), so that every
                        // reconcile at rest does not ask again.
                        Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404) => {
                            Ok((Err(status), None))
                        }
                        Err(e) => Err(e),
                    }
                };
                let follow = |version, opened| super::watch::follow(watch, version, opened);
                let answer: Listed<K> = lists.get_or_read(api.resource_url(), read, follow).await?;
                answer.map_err(kube::Error::Api)
            }
        }
    }
}

/// A list's items and resourceVersion, or the server's refusal (403) or "not served" (404).
type Listed<K> = Result<(Vec<K>, Option<String>), Box<kube::core::Status>>;

/// Every item of a list, following `continue` tokens, and the list's resourceVersion (of the
/// first page: the snapshot all pages belong to).
async fn list_pages<K>(api: &Api<K>) -> Result<(Vec<K>, Option<String>), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    let mut items = Vec::new();
    let mut version = None;
    loop {
        let page = api.list(&params).await?;
        version = version.or(page.metadata.resource_version.clone());
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok((items, version)),
        }
    }
}

/// Runs `read` until it succeeds or fails for good: a transient failure (timeout, 5xx, 429) is
/// tried again, up to `READ_ATTEMPTS` (3) times with a short backoff, so one hiccup of the API
/// server does not fail a check.
pub async fn retrying<T, F, Fut>(mut read: F) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    let mut pause = Duration::from_millis(500);
    for _ in 1..READ_ATTEMPTS {
        match read().await {
            Err(e) if e.is_transient() => {
                // A 429 says how long to wait (`details.retryAfterSeconds`); honour it,
                // within reason.
                let wait = e
                    .retry_after()
                    .map_or(pause, |asked| asked.min(MAX_RETRY_AFTER));
                tracing::warn!("{e}; trying again in {wait:?}");
                tokio::time::sleep(wait).await;
                pause *= 2;
            }
            done => return done,
        }
    }
    read().await
}
