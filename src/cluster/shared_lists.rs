//! Lists shared by the reconciles of many objects: what `tagpin operator` reads from its own
//! cluster (and from each tenant's, as that tenant's ServiceAccount).
//!
//! Every reconcile verifies its object by listing the workloads, pods and GitOps objects of
//! the namespaces its manifests name. With a thousand objects in one namespace that was a
//! thousand lists of the same thousand pods per round: the work grew with objects × namespace
//! size. Here a list of one resource (its URL: group, kind and namespace) is answered again
//! from memory while it is known to be current, and reconciles that ask for the same list at
//! once share one request. A list is current:
//!
//! - for [`SharedLists::max_age`] after it was read (the reconciles of one round share it), and
//! - after that, while a watch started at the list's resourceVersion is open and has seen
//!   nothing added, changed or deleted. The first change (or the watch failing, its version
//!   expiring, the connection going quiet past its round) ends that: the next read lists
//!   again. A fleet at rest then costs one watch per list, not a list per reconcile.
//!
//! A watch the identity may not make (403, a server that serves none) leaves the list current
//! for `max_age` only, as before watches, and that URL is not watched again for a while.
//!
//! Views derived from lists ([`SharedLists::get_or_derive`]: converted, indexed) are current
//! for `max_age`, and after that while no list of this identity has stopped being current
//! since the view was begun: every list that stops being current (a change seen, a watch
//! ended, an unwatched list aging out, a list unread for [`IDLE`] dropped) moves a
//! generation count, and a view remembers the count it was made at.
//!
//! The same count stamps results made of lists ([`SharedLists::stamp`]): a result made after
//! a stamp is still what the lists say while [`SharedLists::stamp_if_watched`] gives the same
//! stamp back (every list watched, none changed). The operator's audits are kept that way.
//!
//! A list is only ever shared within one identity: each [`super::Cluster`] (the
//! operator's own, or one impersonating a tenant's ServiceAccount) has its own. Failures are
//! never kept: the next reconcile asks again. A list not read for [`IDLE`] is dropped, its
//! watch ended, so memory holds the lists the fleet reads.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::mutex::lock;

/// How long the operator reuses a list without a watch: short next to any verification
/// interval, long enough that the reconciles of one round share their reads.
pub const OPERATOR_LIST_AGE: Duration = Duration::from_secs(1);

/// A list (or view) nobody read for this long is dropped, and its watch ended.
const IDLE: Duration = Duration::from_secs(15 * 60);

/// After a watch of a URL was refused, that URL's lists are kept by age only this long.
const REFUSED_FOR: Duration = Duration::from_secs(10 * 60);

/// How a list's watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEnd {
    /// Something listed changed, or the watch stopped telling (failed, expired, went
    /// quiet): the list is no longer known to be current.
    Changed,
    /// The watch could not be opened: refused (403) or not served. The list is kept by age.
    Refused,
}

/// Handed to a list's watch: [`Opened::opened`] says the watch is open, from then on the
/// list is current until the watch ends.
pub struct Opened(Weak<Entry>);

impl Opened {
    pub fn opened(&self) {
        if let Some(entry) = self.0.upgrade() {
            entry.watched.store(true, Ordering::SeqCst);
        }
    }
}

/// An answer and when it came; for a view, the generation it was begun at.
type Answer = (Instant, Option<u64>, Arc<dyn Any + Send + Sync>);

/// One list or view, being read or read.
#[derive(Default)]
pub struct Entry {
    answer: OnceCell<Answer>,
    /// Whether a watch from the list's version is open and has seen nothing change.
    watched: AtomicBool,
    /// When it was last asked for.
    used: Mutex<Option<Instant>>,
    /// The list's watch, ended when the entry goes.
    watch: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(watch) = lock(&self.watch).take() {
            watch.abort();
        }
    }
}

/// The lists read by one identity, by resource URL, and the views made of them.
#[derive(Default)]
pub struct SharedLists {
    max_age: Duration,
    slots: Mutex<HashMap<String, Arc<Entry>>>,
    /// Moves each time a list stops being current: a view is current while it has not moved.
    generation: AtomicU64,
    /// URLs whose watch was refused, and when.
    refused: Mutex<HashMap<String, Instant>>,
    /// Tells these lists from any other identity's in a [`Stamp`].
    id: u64,
}

/// Where an identity's lists stood: two equal stamps, the later taken with every list watched
/// ([`SharedLists::stamp_if_watched`]), say that nothing any list holds changed in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    lists: u64,
    generation: u64,
}

/// The next [`SharedLists`]' id.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl SharedLists {
    pub fn new(max_age: Duration) -> SharedLists {
        SharedLists {
            max_age,
            id: NEXT_ID.fetch_add(1, Ordering::SeqCst),
            ..SharedLists::default()
        }
    }

    /// Where the lists stand now, to be taken before reading what a result is made of.
    pub fn stamp(&self) -> Stamp {
        Stamp {
            lists: self.id,
            generation: self.generation.load(Ordering::SeqCst),
        }
    }

    /// Where the lists stand now if every list held is read and kept current by an open
    /// watch; `None` otherwise (one is current by age only, or being read): a change to it
    /// would move nothing yet, so no result may be taken as unchanged. A result made after an
    /// equal [`SharedLists::stamp`] was made of lists that have not changed since.
    pub fn stamp_if_watched(&self) -> Option<Stamp> {
        let slots = lock(&self.slots);
        let watched = slots
            .values()
            .filter(|e| self.is_list(e))
            .all(|e| e.answer.get().is_some() && e.watched.load(Ordering::SeqCst));
        watched.then(|| self.stamp())
    }

    /// How long an answer is reused without a watch.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// How many lists and views are kept now.
    pub fn len(&self) -> usize {
        lock(&self.slots).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many kept lists a watch keeps current now.
    pub fn watched(&self) -> usize {
        lock(&self.slots)
            .values()
            .filter(|e| e.watched.load(Ordering::SeqCst))
            .count()
    }

    /// The answer to the list at `url`: one that is current (read less than `max_age` ago, or
    /// watched since with no change), the one under way, or a new one made by `read`, which
    /// answers the items and the list's resourceVersion. With a version, `watch` is started
    /// from it (unless that URL's watch was refused lately) and runs until it ends; it calls
    /// [`Opened::opened`] once open. A failed read is returned and not kept. Answers are kept
    /// by URL and type, so a URL read as two types is two lists.
    pub async fn get_or_read<T, F, Fut, E, W, WFut>(
        self: &Arc<Self>,
        url: &str,
        read: F,
        watch: W,
    ) -> Result<T, E>
    where
        T: Clone + Send + Sync + 'static,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(T, Option<String>), E>>,
        W: FnOnce(String, Opened) -> WFut,
        WFut: Future<Output = WatchEnd> + Send + 'static,
    {
        let key = format!("{} {url}", std::any::type_name::<T>());
        let entry = self.slot(&key, Instant::now());
        let (_, _, answer) = entry
            .answer
            .get_or_try_init(|| async {
                let (answer, version) = read().await?;
                if let Some(version) = version.filter(|_| !self.refused_lately(url)) {
                    let opened = Opened(Arc::downgrade(&entry));
                    self.follow(url, &entry, watch(version, opened));
                }
                Ok::<_, E>((
                    Instant::now(),
                    None,
                    Arc::new(answer) as Arc<dyn Any + Send + Sync>,
                ))
            })
            .await?;
        match answer.downcast_ref::<T>() {
            Some(answer) => Ok(answer.clone()),
            // Unreachable while the key names the type; read rather than fail.
            None => read().await.map(|(answer, _)| answer),
        }
    }

    /// What `derive` makes of lists of this identity, kept under `key` while current: for
    /// `max_age`, then while none of this identity's lists has stopped being current since
    /// `derive` began. A failed derivation is returned and not kept.
    pub async fn get_or_derive<T, F, Fut, E>(&self, key: &str, derive: F) -> Result<T, E>
    where
        T: Clone + Send + Sync + 'static,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let key = format!("{} {key}", std::any::type_name::<T>());
        let entry = self.slot(&key, Instant::now());
        let (_, _, answer) = entry
            .answer
            .get_or_try_init(|| async {
                let generation = self.generation.load(Ordering::SeqCst);
                let answer = derive().await?;
                Ok::<_, E>((
                    Instant::now(),
                    Some(generation),
                    Arc::new(answer) as Arc<dyn Any + Send + Sync>,
                ))
            })
            .await?;
        match answer.downcast_ref::<T>() {
            Some(answer) => Ok(answer.clone()),
            None => derive().await,
        }
    }

    /// Whether a watch of `url` was refused less than [`REFUSED_FOR`] ago.
    fn refused_lately(&self, url: &str) -> bool {
        let now = Instant::now();
        let mut refused = lock(&self.refused);
        refused.retain(|_, at| now.saturating_duration_since(*at) < REFUSED_FOR);
        refused.contains_key(url)
    }

    /// Runs `watch` for `entry`, the list at `url`; when it ends the list is no longer
    /// current.
    fn follow<W>(self: &Arc<Self>, url: &str, entry: &Arc<Entry>, watch: W)
    where
        W: Future<Output = WatchEnd> + Send + 'static,
    {
        let (lists, weak, url) = (Arc::downgrade(self), Arc::downgrade(entry), url.to_string());
        let task = tokio::spawn(async move {
            let end = watch.await;
            if let Some(entry) = weak.upgrade() {
                entry.watched.store(false, Ordering::SeqCst);
            }
            if let Some(lists) = lists.upgrade() {
                lists.generation.fetch_add(1, Ordering::SeqCst);
                if end == WatchEnd::Refused {
                    lock(&lists.refused).insert(url, Instant::now());
                }
            }
        });
        *lock(&entry.watch) = Some(task.abort_handle());
    }

    /// The entry of `key` at `now`: a current or pending one is shared; another is replaced.
    /// Lists and views no longer current are dropped on the way: a list that goes moves the
    /// generation before the views are looked at.
    fn slot(&self, key: &str, now: Instant) -> Arc<Entry> {
        let mut slots = lock(&self.slots);
        let before = slots.len();
        slots.retain(|_, e| !self.is_list(e) || self.current(e, now));
        if slots.len() < before {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        slots.retain(|_, e| self.is_list(e) || self.current(e, now));
        let entry = slots.entry(key.to_string()).or_default().clone();
        *lock(&entry.used) = Some(now);
        entry
    }

    fn is_list(&self, entry: &Entry) -> bool {
        entry
            .answer
            .get()
            .is_none_or(|(_, generation, _)| generation.is_none())
    }

    /// Whether `entry` may still answer at `now`.
    fn current(&self, entry: &Entry, now: Instant) -> bool {
        let used = lock(&entry.used).unwrap_or(now);
        if now.saturating_duration_since(used) >= IDLE {
            return false;
        }
        let Some((at, generation, _)) = entry.answer.get() else {
            return true; // under way
        };
        if now.saturating_duration_since(*at) < self.max_age {
            return true;
        }
        match generation {
            None => entry.watched.load(Ordering::SeqCst),
            Some(generation) => *generation == self.generation.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::Notify;

    type Lists = Arc<SharedLists>;

    /// A list read that counts, answers `[1, 2, 3]` at version `v1` (none with `versioned`
    /// false), and takes 20 ms (paused time: the read stays under way while others ask).
    async fn read_as(
        lists: &Lists,
        url: &str,
        reads: &AtomicUsize,
        watch: impl FnOnce(String, Opened) -> futures::future::BoxFuture<'static, WatchEnd>,
    ) -> Result<Vec<u32>, &'static str> {
        lists
            .get_or_read(
                url,
                || async {
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok((vec![1, 2, 3], Some("v1".to_string())))
                },
                watch,
            )
            .await
    }

    /// A watch the server refuses.
    fn refused(_: String, _: Opened) -> futures::future::BoxFuture<'static, WatchEnd> {
        Box::pin(async { WatchEnd::Refused })
    }

    /// A watch that opens and sees a change when `change` is notified.
    fn until(
        change: Arc<Notify>,
    ) -> impl FnOnce(String, Opened) -> futures::future::BoxFuture<'static, WatchEnd> {
        move |version, opened| {
            assert_eq!(version, "v1");
            Box::pin(async move {
                opened.opened();
                change.notified().await;
                WatchEnd::Changed
            })
        }
    }

    async fn read(lists: &Lists, url: &str, reads: &AtomicUsize) -> Result<Vec<u32>, &'static str> {
        read_as(lists, url, reads, refused).await
    }

    /// Lists that keep an answer for a second, their read count, and the change their
    /// watches see when it is notified.
    fn watched_lists() -> (Lists, AtomicUsize, Arc<Notify>) {
        let lists = Arc::new(SharedLists::new(Duration::from_secs(1)));
        (lists, AtomicUsize::new(0), Arc::new(Notify::new()))
    }

    /// A read of `url` whose watch sees `change`.
    async fn read_watched(lists: &Lists, url: &str, reads: &AtomicUsize, change: &Arc<Notify>) {
        read_as(lists, url, reads, until(change.clone()))
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn reconciles_asking_at_once_share_one_read_and_a_later_one_within_the_age_too() {
        let lists = Arc::new(SharedLists::new(Duration::from_secs(60)));
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
    async fn an_unwatched_answer_older_than_the_age_is_read_again_and_old_ones_are_dropped() {
        let lists = Arc::new(SharedLists::new(Duration::from_millis(30)));
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
        let lists = Arc::new(SharedLists::new(Duration::from_secs(60)));
        let failed: Result<Vec<u32>, &str> = lists
            .get_or_read("/a", || async { Err("503") }, refused)
            .await;
        assert_eq!(failed, Err("503"));
        let reads = AtomicUsize::new(0);
        assert_eq!(read(&lists, "/a", &reads).await.unwrap(), vec![1, 2, 3]);
        assert_eq!(reads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stamp_stands_while_every_list_is_watched_and_unchanged() {
        let (lists, reads, change) = watched_lists();
        let before = lists.stamp();
        read_watched(&lists, "/a", &reads, &change).await;
        tokio::task::yield_now().await;
        assert_eq!(lists.stamp_if_watched(), Some(before), "nothing changed");
        // Another identity's lists never stamp the same.
        assert_ne!(SharedLists::new(Duration::from_secs(1)).stamp(), before);
        // A list kept by age only: nothing may be taken as unchanged.
        read(&lists, "/b", &reads).await.unwrap();
        tokio::task::yield_now().await;
        assert_eq!(lists.stamp_if_watched(), None, "/b is not watched");
        tokio::time::advance(Duration::from_secs(2)).await;
        read_watched(&lists, "/a", &reads, &change).await;
        assert_eq!(lists.len(), 1, "/b aged out");
        let watched = lists.stamp_if_watched().expect("only /a, watched");
        assert_ne!(watched, before, "/b went: the stamp moved");
        // A change seen by /a's watch moves it too.
        change.notify_one();
        tokio::task::yield_now().await;
        assert_eq!(lists.stamp_if_watched(), None);
        assert_ne!(lists.stamp(), watched);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watched_list_is_answered_from_memory_until_its_watch_sees_a_change() {
        let (lists, reads, change) = watched_lists();
        read_watched(&lists, "/a", &reads, &change).await;
        tokio::task::yield_now().await;
        assert_eq!(lists.watched(), 1);
        // An hour at rest: no read.
        for _ in 0..60 {
            tokio::time::advance(Duration::from_secs(60)).await;
            read_watched(&lists, "/a", &reads, &change).await;
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // A pod changes: the next read lists again, and is watched again.
        change.notify_one();
        tokio::task::yield_now().await;
        assert_eq!(lists.watched(), 0);
        read_watched(&lists, "/a", &reads, &change).await;
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        tokio::task::yield_now().await;
        assert_eq!(lists.watched(), 1);
        // A change within the age of a read stands until the age passes, as without watches.
        change.notify_one();
        tokio::task::yield_now().await;
        read_watched(&lists, "/a", &reads, &change).await;
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "read less than the age ago"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        read_watched(&lists, "/a", &reads, &change).await;
        assert_eq!(reads.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_watch_keeps_the_list_by_age_and_is_not_asked_again_for_a_while() {
        let lists = Arc::new(SharedLists::new(Duration::from_secs(1)));
        let (reads, watches) = (AtomicUsize::new(0), Arc::new(AtomicUsize::new(0)));
        let counted = |watches: Arc<AtomicUsize>| {
            move |_: String, _: Opened| -> futures::future::BoxFuture<'static, WatchEnd> {
                watches.fetch_add(1, Ordering::SeqCst);
                Box::pin(async { WatchEnd::Refused })
            }
        };
        for _ in 0..3 {
            read_as(&lists, "/a", &reads, counted(watches.clone()))
                .await
                .unwrap();
            tokio::task::yield_now().await;
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        assert_eq!(reads.load(Ordering::SeqCst), 3, "read again after each age");
        assert_eq!(
            watches.load(Ordering::SeqCst),
            1,
            "refused once, not asked again"
        );
        tokio::time::advance(REFUSED_FOR).await;
        read_as(&lists, "/a", &reads, counted(watches.clone()))
            .await
            .unwrap();
        assert_eq!(watches.load(Ordering::SeqCst), 2);
    }

    /// A view of `/a` and `/b` (their sum), counted.
    async fn view(lists: &Lists, made: &AtomicUsize, watch_a: Arc<Notify>) -> u32 {
        let reads = AtomicUsize::new(0);
        lists
            .get_or_derive("sum", || async {
                made.fetch_add(1, Ordering::SeqCst);
                let a = read_as(lists, "/a", &reads, until(watch_a.clone())).await?;
                let b = read_as(lists, "/b", &reads, until(Arc::new(Notify::new()))).await?;
                Ok::<_, &str>(a.iter().chain(&b).sum::<u32>())
            })
            .await
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_view_is_kept_while_its_lists_are_current_and_made_again_when_one_changes() {
        let lists = Arc::new(SharedLists::new(Duration::from_secs(1)));
        let (made, change) = (AtomicUsize::new(0), Arc::new(Notify::new()));
        assert_eq!(view(&lists, &made, change.clone()).await, 12);
        tokio::task::yield_now().await;
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(60)).await;
            view(&lists, &made, change.clone()).await;
        }
        assert_eq!(made.load(Ordering::SeqCst), 1);
        change.notify_one();
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(1)).await;
        view(&lists, &made, change.clone()).await;
        assert_eq!(made.load(Ordering::SeqCst), 2, "/a changed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_view_of_an_unwatched_list_is_made_again_once_the_list_ages_out() {
        let lists = Arc::new(SharedLists::new(Duration::from_secs(1)));
        let (made, reads) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let derive = || async {
            made.fetch_add(1, Ordering::SeqCst);
            read(&lists, "/a", &reads).await.map(|a| a.len())
        };
        lists.get_or_derive("len", derive).await.unwrap();
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(2)).await;
        lists.get_or_derive("len", derive).await.unwrap();
        assert_eq!(made.load(Ordering::SeqCst), 2);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_nobody_reads_is_dropped_and_its_watch_ended() {
        let (lists, reads, change) = watched_lists();
        read_watched(&lists, "/a", &reads, &change).await;
        tokio::task::yield_now().await;
        tokio::time::advance(IDLE).await;
        read(&lists, "/b", &reads).await.unwrap();
        tokio::task::yield_now().await;
        assert_eq!((lists.len(), lists.watched()), (1, 0), "only /b is kept");
    }
}
