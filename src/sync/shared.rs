//! Registry answers shared by many repositories' passes: `tagpin operator` reconciles objects
//! concurrently, and two objects that pin the same `repo:tag` must not each ask the registry.
//!
//! Each distinct reference is asked once per interval: the first pass to need it asks, every
//! pass needing it meanwhile waits for that one answer, and later passes read it until the
//! interval ends. A failed answer is not kept: the next pass to need it asks again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use tokio::sync::OnceCell;

use crate::reference::Reference;
use crate::registry::{Client, ResolveKey, ResolveResult};

/// One interval's answers, by reference.
pub struct SharedAnswers {
    interval: Duration,
    state: Mutex<State>,
}

struct State {
    started: Instant,
    answers: HashMap<ResolveKey, Arc<OnceCell<ResolveResult>>>,
}

impl SharedAnswers {
    pub fn new(interval: Duration) -> SharedAnswers {
        SharedAnswers {
            interval,
            state: Mutex::new(State {
                started: Instant::now(),
                answers: HashMap::new(),
            }),
        }
    }

    /// Forgets the answers for these repositories (`domain/repository`, as a webhook names
    /// them), so the next pass asks again.
    pub fn forget(&self, repositories: &[String]) {
        lock(&self.state)
            .answers
            .retain(|key, _| !repositories.contains(&format!("{}/{}", key.domain, key.repository)));
    }

    /// The answer for each distinct reference: kept, awaited from a pass asking it now, or
    /// asked of `client`.
    pub async fn resolve_all(
        &self,
        client: &Client,
        references: &[Reference],
    ) -> Vec<(ResolveKey, ResolveResult)> {
        let cells: Vec<(ResolveKey, &Reference, Arc<OnceCell<ResolveResult>>)> = {
            let mut state = lock(&self.state);
            if state.started.elapsed() >= self.interval {
                state.started = Instant::now();
                state.answers.clear();
            }
            let mut seen = std::collections::HashSet::new();
            references
                .iter()
                .filter_map(|r| {
                    let key = ResolveKey::of(r);
                    if !seen.insert(key.clone()) {
                        return None;
                    }
                    let cell = state.answers.entry(key.clone()).or_default().clone();
                    Some((key, r, cell))
                })
                .collect()
        };
        let answers = join_all(cells.iter().map(|(key, reference, cell)| async move {
            let answer = cell
                .get_or_init(|| async {
                    let mut one = client.resolve_all(std::iter::once(*reference)).await;
                    one.remove(key).unwrap_or_else(|| {
                        Err(crate::registry::RegistryError::Setup(format!(
                            "{key}: no answer"
                        )))
                    })
                })
                .await;
            answer.clone()
        }))
        .await;
        let mut state = lock(&self.state);
        cells
            .into_iter()
            .zip(answers)
            .map(|((key, _, cell), answer)| {
                if answer.is_err()
                    && state
                        .answers
                        .get(&key)
                        .is_some_and(|kept| Arc::ptr_eq(kept, &cell))
                {
                    state.answers.remove(&key);
                }
                (key, answer)
            })
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
