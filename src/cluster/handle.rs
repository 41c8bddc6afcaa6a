//! [`Cluster`], the handle every reader holds: one API server, one identity (tagpin's own, or
//! a ServiceAccount it impersonates), the clients that reach it, and what its lists leave
//! behind for a wait. Made in `connect.rs`; read through in `list.rs` and `watch.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::ApiResource;

use super::shared_lists::SharedLists;
use crate::mutex::lock;

/// The API server a [`Cluster`] talks to, as its errors name it.
#[derive(Debug)]
pub struct Server {
    /// `https://10.0.0.1:6443`.
    pub url: String,
    /// How long one request may go without progress (see [`Cluster::connect_to`]).
    pub timeout: Duration,
}

/// A ServiceAccount a [`Cluster`] reads as, impersonated: in a shared operator install, the
/// tenant's, so that the tenant's RBAC (not the operator's) decides what its objects see.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccount {
    /// The user the API server knows it as, and the `Impersonate-User` header carries.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// `team-a/tagpin`.
impl std::fmt::Display for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A connection to one API server, as one identity: tagpin's own, or a ServiceAccount it
/// impersonates. Read-only by construction: it offers lists and watches, nothing that writes
/// (see `deploy/common/rbac.yaml`: get, list and watch are all a reader needs).
pub struct Cluster {
    /// Every read goes through this client, whose requests give up after [`Server::timeout`]
    /// without progress.
    pub(super) client: kube::Client,
    /// For watches only: a quiet watch sends nothing for minutes, so it has no read timeout;
    /// [`Cluster::wait_for_change`] bounds and ends every watch itself.
    pub(super) watch_client: kube::Client,
    pub(super) server: Arc<Server>,
    /// Where the lists read through this handle stand: what [`Cluster::wait_for_change`]
    /// watches from.
    pub(super) seen: std::sync::Mutex<Seen>,
    /// The connection's configuration with its timeouts and retry settings, before any
    /// impersonation: what [`Cluster::impersonating`] starts from.
    pub(super) config: Arc<kube::Config>,
    /// The ServiceAccount every request impersonates, if any. A read it is refused is then
    /// the tenant's limit, not a fault of tagpin's: not verified, said in tagpin's words.
    pub(super) acting_as: Option<Arc<ServiceAccount>>,
    /// Lists reused by every reconcile reading as this identity (the operator); `None`: each
    /// check lists afresh (`verify`, `run`, `--wait`).
    pub(super) shared_lists: Option<Arc<SharedLists>>,
}

/// Another handle on the same API server, sharing its clients: the operator's own cluster is
/// also the cluster of a stage declared `in_cluster`.
impl Clone for Cluster {
    fn clone(&self) -> Cluster {
        Cluster {
            client: self.client.clone(),
            watch_client: self.watch_client.clone(),
            server: self.server.clone(),
            seen: std::sync::Mutex::new(lock(&self.seen).clone()),
            config: self.config.clone(),
            acting_as: self.acting_as.clone(),
            shared_lists: self.shared_lists.clone(),
        }
    }
}

impl Cluster {
    /// The ServiceAccount this cluster impersonates, if any.
    pub fn acting_as(&self) -> Option<&ServiceAccount> {
        self.acting_as.as_deref()
    }

    /// The API server, as errors and refusals name it.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// This cluster with its lists shared by every check made through it (and its clones) for
    /// `max_age` ([`SharedLists`]). Impersonating clusters made from it share theirs among
    /// themselves, never with it.
    pub fn sharing_lists(mut self, max_age: Duration) -> Cluster {
        self.shared_lists = Some(Arc::new(SharedLists::new(max_age)));
        self
    }

    /// Where the shared lists stand, taken before a read ([`SharedLists::stamp`]); `None`
    /// when lists are not shared (each read lists afresh).
    pub fn lists_stamp(&self) -> Option<super::shared_lists::Stamp> {
        self.shared_lists.as_ref().map(|lists| lists.stamp())
    }

    /// Where the shared lists stand if every one is kept current by a watch
    /// ([`SharedLists::stamp_if_watched`]).
    pub fn lists_stamp_if_watched(&self) -> Option<super::shared_lists::Stamp> {
        self.shared_lists.as_ref()?.stamp_if_watched()
    }
}

/// Where each list read through one handle stands, by namespace and resource
/// (`apps/v1/deployments`): what [`Cluster::wait_for_change`] watches from.
pub(super) type Seen = BTreeMap<(String, String), Listed>;

/// A list read: what to watch, and the resourceVersion a watch for what changed since starts
/// at.
#[derive(Debug, Clone)]
pub(super) struct Listed {
    pub(super) resource: ApiResource,
    pub(super) version: String,
}

impl Cluster {
    /// Notes where the list of `resource` in `namespace` stands, for the next wait.
    pub(super) fn remember(&self, namespace: &str, resource: ApiResource, version: String) {
        let key = (
            namespace.to_string(),
            format!("{}/{}", resource.api_version, resource.plural),
        );
        lock(&self.seen).insert(key, Listed { resource, version });
    }
}
