//! Waiting for what was listed to change, so that `verify --wait` wakes when a pod turns ready
//! or a rollout moves, rather than polling on a timer.
//!
//! Each namespaced list a [`Cluster`] reads (see `list.rs`) leaves its resourceVersion here;
//! [`Cluster::wait_for_change`] watches every such list from there, so only real changes wake
//! it. Watches are bounded: each asks the server to end it within the wait, and the wait ends
//! them all itself.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};

use super::handle::Cluster;
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
