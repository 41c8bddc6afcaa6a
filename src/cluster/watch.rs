//! Waiting for what was listed to change, so that `verify --wait` wakes when a pod turns ready
//! or a rollout moves, rather than polling on a timer.
//!
//! Each namespaced list a [`Cluster`] reads (see `list.rs`) leaves its resourceVersion here;
//! [`Cluster::wait_for_change`] watches every such list from there, so only real changes wake
//! it. Watches are bounded: each asks the server to end it within the wait, and the wait ends
//! them all itself.
//!
//! Shared lists (the operator's) are kept current the same way: [`follow`] watches one list
//! from its resourceVersion until anything in it changes ([`super::SharedLists`]).

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};

use super::handle::Cluster;
use super::shared_lists::{Opened, WatchEnd};
use crate::mutex::lock;

impl Cluster {
    /// Waits until something tagpin last listed changes (a pod turns ready, a rollout moves),
    /// or `timeout` passes. Watches start at the resourceVersion of the last lists, so only
    /// real changes wake it; where a watch cannot be opened (no `watch` permission, an old
    /// server) it simply waits out the timeout, which makes `--wait` poll.
    pub async fn wait_for_change(&self, timeout: Duration) -> bool {
        let seen = lock(&self.seen).clone();
        let seconds = u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let mut watches = Vec::new();
        for ((namespace, _), listed) in seen {
            let (client, tx) = (self.watch_client.clone(), tx.clone());
            watches.push(tokio::spawn(async move {
                let api =
                    Api::<DynamicObject>::namespaced_with(client, &namespace, &listed.resource);
                if changes(api, &namespace, &listed.version, seconds).await {
                    let _ = tx.send(()).await;
                }
            }));
        }
        drop(tx);
        let started = tokio::time::Instant::now();
        let changed = match tokio::time::timeout(timeout, rx.recv()).await {
            Ok(Some(())) => true,
            // Every watch ended without a change (refused, or closed by the server): poll.
            Ok(None) => {
                tokio::time::sleep(timeout.saturating_sub(started.elapsed())).await;
                false
            }
            Err(_) => false,
        };
        for watch in watches {
            watch.abort();
        }
        changed
    }
}

/// Whether a watch from `version` sees an object added, modified or deleted within
/// `seconds`. An `ERROR` event (the version expired) counts as a change: the caller lists
/// again. A watch that cannot be opened or fails sees nothing.
async fn changes(api: Api<DynamicObject>, namespace: &str, version: &str, seconds: u32) -> bool {
    let params = WatchParams::default().timeout(seconds);
    let Ok(stream) = api.watch(&params, version).await else {
        return false;
    };
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(WatchEvent::Bookmark(_)) => continue,
            Ok(_) => return true,
            Err(e) => {
                tracing::debug!("watch of {namespace} ended: {e}");
                return false;
            }
        }
    }
    false
}

/// How long the server keeps one round of a shared list's watch open (`timeoutSeconds`); the
/// next round starts where the last stood.
const ROUND_SECONDS: u32 = 60;

/// How long past its `timeoutSeconds` a round may stay open before the watch is taken for
/// lost (a connection that died without closing): the list then stops being current.
const ROUND_GRACE: Duration = Duration::from_secs(15);

/// Watches the list `api` reads from `version` (its resourceVersion) until something in it is
/// added, changed or deleted, or the watch stops telling: what keeps a shared list current
/// ([`super::SharedLists`]). Rounds of [`ROUND_SECONDS`] follow each other from the last
/// bookmark's version; a version expired (410), a failure, or a round that outlives its
/// timeout by [`ROUND_GRACE`] ends it as a change, so the list is read again. A first round
/// the server will not open (403, 404, 405) is [`WatchEnd::Refused`]: the list is kept by age.
pub(super) async fn follow<K>(api: Api<K>, mut version: String, opened: Opened) -> WatchEnd
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let limit = Duration::from_secs(u64::from(ROUND_SECONDS)) + ROUND_GRACE;
    let mut first = true;
    loop {
        match tokio::time::timeout(limit, round(&api, &mut version, &opened, first)).await {
            Ok(None) => first = false,
            Ok(Some(end)) => return end,
            Err(_) => {
                tracing::debug!("watch of {} went quiet past its round", api.resource_url());
                return WatchEnd::Changed;
            }
        }
    }
}

/// One round of [`follow`]: `None` when the server closed it with nothing changed (`version`
/// then stands at its last bookmark).
async fn round<K>(
    api: &Api<K>,
    version: &mut String,
    opened: &Opened,
    first: bool,
) -> Option<WatchEnd>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = WatchParams::default().timeout(ROUND_SECONDS);
    let stream = match api.watch(&params, version).await {
        Ok(stream) => stream,
        Err(kube::Error::Api(status)) if first && (403..=405).contains(&status.code) => {
            tracing::debug!("no watch of {}: {}", api.resource_url(), status.message);
            return Some(WatchEnd::Refused);
        }
        Err(e) => {
            tracing::debug!("watch of {} failed: {e}", api.resource_url());
            return Some(WatchEnd::Changed);
        }
    };
    opened.opened();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(WatchEvent::Bookmark(bookmark)) => {
                *version = bookmark.metadata.resource_version;
            }
            // Added, modified, deleted; or an error event (the version expired).
            Ok(_) => return Some(WatchEnd::Changed),
            Err(e) => {
                tracing::debug!("watch of {} ended: {e}", api.resource_url());
                return Some(WatchEnd::Changed);
            }
        }
    }
    None
}
