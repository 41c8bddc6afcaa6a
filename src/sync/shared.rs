//! Registry answers shared by many repositories' passes: `tagpin operator` reconciles objects
//! concurrently, and two objects that pin the same `repo:tag`, or follow the same repository's
//! versions, must not each ask the registry.
//!
//! Each distinct reference is resolved, and each repository's tags listed, once per interval:
//! the first pass to need it asks, every pass needing it meanwhile waits for that one answer,
//! and later passes read it until the interval ends. A failed answer is not kept: the next
//! pass to need it asks again.
//!
//! One `SharedAnswers` serves the passes of one registry client, that is of one set of
//! credentials (the operator keeps one beside each client): what a client with credentials
//! was told is never an answer for a pass without them.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::mutex::lock;
use crate::policy::RepositoryKey;
use crate::reference::Reference;
use crate::registry::{Client, RegistryError, ResolveKey, ResolveResult};

/// What a registry answered for one repository's tag list.
pub type TagList = Result<Vec<String>, RegistryError>;

tokio::task_local! {
    /// The repositories the pass running in this task asked about (see [`noting_asked`]).
    static ASKED: RefCell<BTreeSet<String>>;
}

/// Runs `pass`, and returns with its output the repositories (`domain/repository`, as a
/// registry webhook names them) it asked shared answers about: resolved or listed, answered
/// from memory or by the registry. The operator routes a webhook naming one of them to this
/// pass's object.
pub async fn noting_asked<F: Future>(pass: F) -> (F::Output, BTreeSet<String>) {
    ASKED
        .scope(RefCell::new(BTreeSet::new()), async move {
            let output = pass.await;
            (output, ASKED.with(RefCell::take))
        })
        .await
}

/// Notes `domain/repository` as asked by the pass of this task, if one is noting.
fn note_asked(domain: &str, repository: &str) {
    let _ = ASKED.try_with(|asked| asked.borrow_mut().insert(format!("{domain}/{repository}")));
}

/// One interval's answers, by reference and by repository.
pub struct SharedAnswers {
    interval: Duration,
    state: Mutex<State>,
}

struct State {
    started: Instant,
    answers: Memo<ResolveKey, ResolveResult>,
    tags: Memo<RepositoryKey, TagList>,
}

impl State {
    /// Starts a new interval, empty, once the current one is over.
    fn roll(&mut self, interval: Duration) {
        if self.started.elapsed() >= interval {
            self.started = Instant::now();
            self.answers.0.clear();
            self.tags.0.clear();
        }
    }
}

/// Answers by key, each asked once: a cell is filled by the first pass to need it.
struct Memo<K, V>(BTreeMap<K, Arc<OnceCell<V>>>);

impl<K: Ord + Clone, V> Memo<K, V> {
    fn cell(&mut self, key: &K) -> Arc<OnceCell<V>> {
        self.0.entry(key.clone()).or_default().clone()
    }

    /// Drops `cell`'s failed answer, unless the interval rolled over (or a webhook forgot it)
    /// and another cell holds the key now.
    fn forget_failed<T>(
        &mut self,
        key: &K,
        cell: &Arc<OnceCell<V>>,
        answer: &Result<T, RegistryError>,
    ) {
        if answer.is_err() && self.0.get(key).is_some_and(|kept| Arc::ptr_eq(kept, cell)) {
            self.0.remove(key);
        }
    }
}

impl SharedAnswers {
    pub fn new(interval: Duration) -> SharedAnswers {
        SharedAnswers {
            interval,
            state: Mutex::new(State {
                started: Instant::now(),
                answers: Memo(BTreeMap::new()),
                tags: Memo(BTreeMap::new()),
            }),
        }
    }

    /// Forgets the answers and tag lists for these repositories (`domain/repository`, as a
    /// webhook names them), so the next pass asks again: a push may have moved a tag or added
    /// one.
    pub fn forget(&self, repositories: &[String]) {
        let named = |domain: &str, repository: &str| {
            repositories.contains(&format!("{domain}/{repository}"))
        };
        let mut state = lock(&self.state);
        state
            .answers
            .0
            .retain(|key, _| !named(&key.domain, &key.repository));
        state
            .tags
            .0
            .retain(|key, _| !named(&key.domain, &key.repository));
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
            state.roll(self.interval);
            let mut seen = std::collections::HashSet::new();
            references
                .iter()
                .filter_map(|r| {
                    let key = ResolveKey::of(r);
                    note_asked(&key.domain, &key.repository);
                    if !seen.insert(key.clone()) {
                        return None;
                    }
                    let cell = state.answers.cell(&key);
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
                state.answers.forget_failed(&key, &cell, &answer);
                (key, answer)
            })
            .collect()
    }

    /// The tag list of each repository in `wanted` (one reference to it each): kept, awaited
    /// from a pass listing it now, or listed by `list` (the caller's registry request, with
    /// its own time budget).
    pub async fn tag_lists<'r, F, Fut>(
        &self,
        wanted: &[(RepositoryKey, &'r Reference)],
        list: F,
    ) -> Vec<(RepositoryKey, TagList)>
    where
        F: Fn(&'r Reference) -> Fut,
        Fut: Future<Output = TagList>,
    {
        let cells: Vec<Arc<OnceCell<TagList>>> = {
            let mut state = lock(&self.state);
            state.roll(self.interval);
            for (key, _) in wanted {
                note_asked(&key.domain, &key.repository);
            }
            wanted.iter().map(|(key, _)| state.tags.cell(key)).collect()
        };
        let list = &list;
        let lists = join_all(
            wanted
                .iter()
                .zip(&cells)
                .map(|((_, reference), cell)| async move {
                    cell.get_or_init(|| list(reference)).await.clone()
                }),
        )
        .await;
        let mut state = lock(&self.state);
        wanted
            .iter()
            .zip(cells)
            .zip(lists)
            .map(|(((key, _), cell), list)| {
                state.tags.forget_failed(key, &cell, &list);
                (key.clone(), list)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn web() -> (RepositoryKey, Reference) {
        let reference = Reference::parse("registry.example/acme/web:1.4.0").unwrap();
        (RepositoryKey::of(&reference), reference)
    }

    /// A tag list as a registry would answer it, counting the requests made for it.
    async fn listed(asked: &AtomicUsize, answer: TagList) -> TagList {
        asked.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        answer
    }

    fn tags() -> TagList {
        Ok(vec!["1.4.0".to_string(), "1.4.1".to_string()])
    }

    #[tokio::test]
    async fn a_pass_notes_the_repositories_it_asked_about_answered_or_not() {
        let shared = SharedAnswers::new(Duration::from_secs(3600));
        let asked = AtomicUsize::new(0);
        let (key, reference) = web();
        let wanted = [(key, &reference)];
        shared.tag_lists(&wanted, |_| listed(&asked, tags())).await;
        // The second pass is answered from memory: it uses the repository all the same.
        let (lists, noted) =
            noting_asked(shared.tag_lists(&wanted, |_| listed(&asked, tags()))).await;
        assert_eq!(lists.len(), 1);
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        assert_eq!(
            noted,
            BTreeSet::from(["registry.example/acme/web".to_string()])
        );
        // Outside a noting pass, nothing is noted, and nothing fails.
        shared.tag_lists(&wanted, |_| listed(&asked, tags())).await;
    }

    #[tokio::test]
    async fn passes_listing_one_repository_at_once_and_later_share_one_request() {
        let shared = SharedAnswers::new(Duration::from_secs(3600));
        let asked = AtomicUsize::new(0);
        let (key, reference) = web();
        let wanted = [(key.clone(), &reference)];
        let (one, two) = tokio::join!(
            shared.tag_lists(&wanted, |_| listed(&asked, tags())),
            shared.tag_lists(&wanted, |_| listed(&asked, tags())),
        );
        let later = shared.tag_lists(&wanted, |_| listed(&asked, tags())).await;
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        for answer in [one, two, later] {
            assert_eq!(answer.len(), 1);
            assert_eq!(answer[0].0, key);
            assert_eq!(answer[0].1.as_ref().unwrap(), &tags().unwrap());
        }
    }

    #[tokio::test]
    async fn a_failed_list_is_asked_again_and_a_new_interval_or_a_webhook_asks_again() {
        let asked = AtomicUsize::new(0);
        let (key, reference) = web();
        let wanted = [(key, &reference)];
        let refused = || {
            Err(RegistryError::Setup(
                "registry.example/acme/web: 503".to_string(),
            ))
        };
        let shared = SharedAnswers::new(Duration::from_secs(3600));
        let first = shared
            .tag_lists(&wanted, |_| listed(&asked, refused()))
            .await;
        assert!(first[0].1.is_err());
        let second = shared.tag_lists(&wanted, |_| listed(&asked, tags())).await;
        assert!(second[0].1.is_ok());
        assert_eq!(asked.load(Ordering::SeqCst), 2, "the failure was not kept");

        shared.forget(&["registry.example/acme/web".to_string()]);
        shared.tag_lists(&wanted, |_| listed(&asked, tags())).await;
        assert_eq!(
            asked.load(Ordering::SeqCst),
            3,
            "a push to it was announced"
        );
        shared.forget(&["registry.example/acme/api".to_string()]);
        shared.tag_lists(&wanted, |_| listed(&asked, tags())).await;
        assert_eq!(asked.load(Ordering::SeqCst), 3, "another repository's push");

        let every_time = SharedAnswers::new(Duration::ZERO);
        for _ in 0..2 {
            every_time
                .tag_lists(&wanted, |_| listed(&asked, tags()))
                .await;
        }
        assert_eq!(asked.load(Ordering::SeqCst), 5, "each call a new interval");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_kept_until_the_interval_ends_and_not_a_second_longer() {
        let asked = AtomicUsize::new(0);
        let (key, reference) = web();
        let wanted = [(key, &reference)];
        let shared = SharedAnswers::new(Duration::from_secs(300));
        shared.tag_lists(&wanted, |_| listed(&asked, tags())).await;
        tokio::time::advance(Duration::from_secs(299)).await;
        shared.tag_lists(&wanted, |_| listed(&asked, tags())).await;
        assert_eq!(asked.load(Ordering::SeqCst), 1, "still the same interval");
        tokio::time::advance(Duration::from_secs(1)).await;
        shared.tag_lists(&wanted, |_| listed(&asked, tags())).await;
        assert_eq!(asked.load(Ordering::SeqCst), 2, "a new interval asks again");
    }
}
