//! Reconcile slots shared fairly between namespaces.
//!
//! One team's objects must not hold up another's: four objects whose registry never answers
//! would otherwise fill the controller's four reconcile slots, and every other team would wait
//! for their deadlines. The `Controller` hands every due object to [`Slots::acquire`] at once
//! (its own concurrency is unbounded) and the slots decide who runs:
//!
//! - up to `concurrent` reconciles run at once, whatever their namespace;
//! - beyond that, a namespace with nothing running still starts one at once, up to twice
//!   `concurrent` in all: a namespace whose objects hang costs its own objects' time, and
//!   another team's object starts in seconds however many slots the first one holds;
//! - when a slot frees, the waiting namespace with the fewest reconciles running goes first,
//!   earliest arrival breaking ties, so a namespace with a hundred objects due cannot starve
//!   one with a single object.
//!
//! - a reconcile a registry webhook asked for (`urgent`) goes before every scheduled one
//!   waiting, by the same rule among the urgent ones: at 10,000 objects, the ten a push
//!   concerns must not wait behind the interval's passes of their namespace.
//!
//! The rule is [`may_start`] and [`next_waiter`], pure; [`Slots`] only keeps the counts.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::mutex::lock;
use tokio::sync::oneshot;

/// Whether a reconcile of a namespace that has `in_namespace` running may start while
/// `running` run in all, with `concurrent` slots.
pub fn may_start(running: usize, in_namespace: usize, concurrent: usize) -> bool {
    let concurrent = concurrent.max(1);
    running < concurrent || (in_namespace == 0 && running < concurrent.saturating_mul(2))
}

/// Which of the `waiting` namespaces (in arrival order) starts next, given how many each has
/// running: among those allowed to start, the one with the fewest running, the earliest of
/// them on a tie.
pub fn next_waiter<'a>(
    waiting: impl IntoIterator<Item = &'a str>,
    running_in: impl Fn(&str) -> usize,
    running: usize,
    concurrent: usize,
) -> Option<usize> {
    waiting
        .into_iter()
        .enumerate()
        .filter(|(_, namespace)| may_start(running, running_in(namespace), concurrent))
        .min_by_key(|(i, namespace)| (running_in(namespace), *i))
        .map(|(i, _)| i)
}

/// The reconcile slots of one controller.
#[derive(Clone)]
pub struct Slots {
    inner: Arc<Mutex<State>>,
    concurrent: usize,
}

#[derive(Default)]
struct State {
    running: usize,
    by_namespace: BTreeMap<String, usize>,
    /// Reconciles a webhook asked for, served before [`State::waiting`].
    urgent: VecDeque<(String, oneshot::Sender<Slot>)>,
    waiting: VecDeque<(String, oneshot::Sender<Slot>)>,
}

impl State {
    fn running_in(&self, namespace: &str) -> usize {
        self.by_namespace.get(namespace).copied().unwrap_or(0)
    }

    fn take(&mut self, namespace: &str) {
        self.running += 1;
        *self.by_namespace.entry(namespace.to_string()).or_insert(0) += 1;
    }

    fn give_back(&mut self, namespace: &str) {
        self.running = self.running.saturating_sub(1);
        if let Some(n) = self.by_namespace.get_mut(namespace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_namespace.remove(namespace);
            }
        }
    }
}

/// A running reconcile's slot, given back when dropped (a reconcile that finished, failed,
/// timed out or was cancelled).
pub struct Slot {
    slots: Slots,
    namespace: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release(&self.namespace);
    }
}

impl Slots {
    pub fn new(concurrent: usize) -> Slots {
        Slots {
            inner: Arc::default(),
            concurrent: concurrent.max(1),
        }
    }

    /// Waits for a slot for a reconcile of an object of `namespace`; an `urgent` one (a
    /// webhook's) goes before every scheduled one waiting.
    pub async fn acquire(&self, namespace: &str, urgent: bool) -> Slot {
        let receiver = {
            let mut state = lock(&self.inner);
            // No waiter could start now (each release starts every one that may), so nobody
            // is passed over by starting at once.
            if may_start(state.running, state.running_in(namespace), self.concurrent) {
                state.take(namespace);
                return self.slot(namespace);
            }
            let (sender, receiver) = oneshot::channel();
            let queue = match urgent {
                true => &mut state.urgent,
                false => &mut state.waiting,
            };
            queue.push_back((namespace.to_string(), sender));
            receiver
        };
        match receiver.await {
            Ok(slot) => slot,
            // Senders are only dropped when handed a slot or when the slots go away, which
            // they do not while an acquire holds them; start rather than hang all the same.
            Err(_) => {
                lock(&self.inner).take(namespace);
                self.slot(namespace)
            }
        }
    }

    /// Reconciles running now, in all and in `namespace`.
    pub fn running(&self, namespace: &str) -> (usize, usize) {
        let state = lock(&self.inner);
        (state.running, state.running_in(namespace))
    }

    fn slot(&self, namespace: &str) -> Slot {
        Slot {
            slots: self.clone(),
            namespace: namespace.to_string(),
        }
    }

    /// Gives a slot back and starts whoever may start now. A waiter that went away (its
    /// reconcile was cancelled) drops the slot it was handed, which comes back here.
    fn release(&self, namespace: &str) {
        let mut handed = Vec::new();
        {
            let mut state = lock(&self.inner);
            state.give_back(namespace);
            loop {
                let next = |queue: &VecDeque<(String, oneshot::Sender<Slot>)>| {
                    next_waiter(
                        queue.iter().map(|(ns, _)| ns.as_str()),
                        |ns| state.running_in(ns),
                        state.running,
                        self.concurrent,
                    )
                };
                let taken = match (next(&state.urgent), next(&state.waiting)) {
                    (Some(i), _) => state.urgent.remove(i),
                    (None, Some(i)) => state.waiting.remove(i),
                    (None, None) => None,
                };
                let Some((ns, sender)) = taken else { break };
                state.take(&ns);
                handed.push((sender, self.slot(&ns)));
            }
        }
        // Outside the lock: a refused hand-over drops its slot, which calls back in here.
        for (sender, slot) in handed {
            drop(sender.send(slot));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_namespace_with_nothing_running_starts_beyond_the_limit_up_to_twice_it() {
        assert!(may_start(3, 3, 4));
        assert!(!may_start(4, 4, 4));
        assert!(may_start(4, 0, 4));
        assert!(may_start(7, 0, 4));
        assert!(!may_start(8, 0, 4));
        assert!(!may_start(5, 1, 4));
        // One slot: one more for another namespace.
        assert!(may_start(1, 0, 1));
        assert!(!may_start(2, 0, 1));
    }

    #[test]
    fn the_waiting_namespace_with_fewest_running_goes_first_then_the_earliest() {
        let running = |ns: &str| match ns {
            "busy" => 3,
            "some" => 1,
            _ => 0,
        };
        assert_eq!(
            next_waiter(["busy", "some", "idle", "idle2"], running, 3, 4),
            Some(2)
        );
        assert_eq!(next_waiter(["busy", "some"], running, 3, 4), Some(1));
        // Full: only a namespace with nothing running may start, within twice the limit.
        assert_eq!(next_waiter(["busy", "some"], running, 4, 4), None);
        assert_eq!(next_waiter(["busy", "idle"], running, 4, 4), Some(1));
        assert_eq!(next_waiter(["busy", "idle"], running, 8, 4), None);
        assert_eq!(next_waiter(Vec::<&str>::new(), running, 0, 4), None);
    }

    #[tokio::test(start_paused = true)]
    async fn another_team_starts_at_once_while_one_team_holds_every_slot() {
        let slots = Slots::new(4);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(slots.acquire("team-b", false).await);
        }
        // A fifth of team-b's waits; team-a's first starts at once.
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("team-b", false).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        let team_a = tokio::time::timeout(Duration::from_millis(1), slots.acquire("team-a", false))
            .await
            .expect("team-a starts at once");
        assert_eq!(slots.running("team-a"), (5, 1));
        // A second of team-a's waits: team-a is no longer idle and every slot is taken.
        let second_a = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("team-a", false).await }
        });
        tokio::task::yield_now().await;
        assert!(!second_a.is_finished());
        // Slots free: once the total is under the limit again, team-a (1 running) goes before
        // team-b (2 running), though team-b's came first.
        drop(held.pop());
        tokio::task::yield_now().await;
        assert!(!second_a.is_finished(), "4 + 1 running: still full");
        drop(held.pop());
        let second_a = second_a.await.unwrap();
        assert_eq!(slots.running("team-a"), (4, 2));
        assert!(!waiting.is_finished());
        drop(team_a);
        let fifth_b = waiting.await.unwrap();
        assert_eq!(slots.running("team-b"), (4, 3));
        drop((second_a, fifth_b, held));
        assert_eq!(slots.running("team-b"), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_webhooks_reconcile_goes_before_the_scheduled_ones_waiting() {
        let slots = Slots::new(1);
        let running = slots.acquire("fleet-0", false).await;
        let waiter = |namespace: &'static str, urgent: bool| {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire(namespace, urgent).await })
        };
        let scheduled = waiter("fleet-0", false);
        tokio::task::yield_now().await;
        let urgent = waiter("fleet-0", true);
        tokio::task::yield_now().await;
        drop(running);
        let urgent = urgent.await.unwrap();
        assert!(
            !scheduled.is_finished(),
            "the scheduled one came first, and waits"
        );
        drop(urgent);
        drop(scheduled.await.unwrap());
        assert_eq!(slots.running("fleet-0"), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_gives_its_slot_back() {
        let slots = Slots::new(1);
        let first = slots.acquire("a", false).await;
        let second = slots.acquire("b", false).await; // idle namespace: beyond the limit
        let cancelled = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire("a", false).await }
        });
        tokio::task::yield_now().await;
        cancelled.abort();
        let _ = cancelled.await;
        drop(first);
        drop(second);
        assert_eq!(slots.running("a"), (0, 0));
        let again = tokio::time::timeout(Duration::from_millis(1), slots.acquire("a", false)).await;
        assert!(again.is_ok());
    }
}
