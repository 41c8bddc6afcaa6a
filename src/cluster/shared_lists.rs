//! Lists shared by the reconciles of many objects: what `tagpin operator` reads from its own
//! cluster (and from each tenant's, as that tenant's ServiceAccount).
//!
//! Every reconcile verifies its object by listing the workloads, pods and GitOps objects of
//! the namespaces its manifests name. With a thousand objects in one namespace that was a
//! thousand lists of the same thousand pods per round: the work grew with objects × namespace
//! size. Here a list of one resource (its URL: group, kind and namespace) answered less than
//! [`SharedLists::max_age`] ago is answered again from memory, and reconciles that ask for the
//! same list at once share one request. The API requests then grow with the distinct lists per
//! `max_age`, not with the objects.
//!
//! A list is only ever shared within one identity: each [`super::Cluster`] (the
//! operator's own, or one impersonating a tenant's ServiceAccount) has its own. Failures are
//! never kept: the next reconcile asks again. Entries older than `max_age` are dropped on the
//! next read, so memory holds at most the lists read within the last `max_age`.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::mutex::lock;

/// How long the operator reuses a list: short next to any verification interval, long
/// enough that the reconciles of one round share their reads.
pub const OPERATOR_LIST_AGE: Duration = Duration::from_secs(1);

/// One list, being read or read: its answer and when it came.
type Slot = Arc<OnceCell<(Instant, Arc<dyn Any + Send + Sync>)>>;

/// The lists read recently by one identity, by resource URL.
#[derive(Default)]
pub struct SharedLists {
    max_age: Duration,
    slots: Mutex<HashMap<String, Slot>>,
}

impl SharedLists {
    pub fn new(max_age: Duration) -> SharedLists {
        SharedLists {
            max_age,
            slots: Mutex::default(),
        }
    }

    /// How long an answer is reused.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// How many lists are kept now.
    pub fn len(&self) -> usize {
        lock(&self.slots).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The answer to the list at `url`: one read less than `max_age` ago, the one under way,
    /// or a new one made by `read`. A failed read is returned and not kept. Answers are kept
    /// by URL and type, so a URL read as two types is two lists.
    pub async fn get_or_read<T, F, Fut, E>(&self, url: &str, read: F) -> Result<T, E>
    where
        T: Clone + Send + Sync + 'static,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let key = format!("{} {url}", std::any::type_name::<T>());
        let slot = self.slot(&key, Instant::now());
        let (_, answer) = slot
            .get_or_try_init(|| async {
                let answer = read().await?;
                Ok::<_, E>((
                    Instant::now(),
                    Arc::new(answer) as Arc<dyn Any + Send + Sync>,
                ))
            })
            .await?;
        match answer.downcast_ref::<T>() {
            Some(answer) => Ok(answer.clone()),
            // Unreachable while the key names the type; read rather than fail.
            None => read().await,
        }
    }

    /// The slot of `key` at `now`: a fresh or pending one is shared; an old one is replaced.
    /// Old slots of other lists are dropped on the way.
    fn slot(&self, key: &str, now: Instant) -> Slot {
        let fresh = |slot: &Slot| {
            slot.get()
                .is_none_or(|(at, _)| now.saturating_duration_since(*at) < self.max_age)
        };
        let mut slots = lock(&self.slots);
        slots.retain(|_, slot| fresh(slot));
        slots.entry(key.to_string()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn read(
        lists: &SharedLists,
        url: &str,
        reads: &AtomicUsize,
    ) -> Result<Vec<u32>, &'static str> {
        lists
            .get_or_read(url, || async {
                reads.fetch_add(1, Ordering::SeqCst);
                // Paused time: the read stays under way while the others ask.
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(vec![1, 2, 3])
            })
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn reconciles_asking_at_once_share_one_read_and_a_later_one_within_the_age_too() {
        let lists = SharedLists::new(Duration::from_secs(60));
        let reads = AtomicUsize::new(0);
        let url = "/api/v1/namespaces/fleet/pods";
        let (a, b, c) = tokio::join!(
            read(&lists, url, &reads),
            read(&lists, url, &reads),
            read(&lists, url, &reads)
        );
        assert_eq!(
            (a.unwrap(), b.unwrap(), c.unwrap().len()),
            (vec![1, 2, 3], vec![1, 2, 3], 3)
        );
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        read(&lists, url, &reads).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // Another namespace is another list.
        read(&lists, "/api/v1/namespaces/other/pods", &reads)
            .await
            .unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_older_than_the_age_is_read_again_and_old_ones_are_dropped() {
        let lists = SharedLists::new(Duration::from_millis(30));
        let reads = AtomicUsize::new(0);
        read(&lists, "/a", &reads).await.unwrap();
        read(&lists, "/b", &reads).await.unwrap();
        assert_eq!(lists.len(), 2);
        tokio::time::advance(Duration::from_millis(40)).await;
        read(&lists, "/a", &reads).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 3);
        assert_eq!(lists.len(), 1, "/b aged out");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_is_not_kept() {
        let lists = SharedLists::new(Duration::from_secs(60));
        let failed: Result<Vec<u32>, &str> = lists.get_or_read("/a", || async { Err("503") }).await;
        assert_eq!(failed, Err("503"));
        let reads = AtomicUsize::new(0);
        assert_eq!(read(&lists, "/a", &reads).await.unwrap(), vec![1, 2, 3]);
        assert_eq!(reads.load(Ordering::SeqCst), 1);
    }
}
