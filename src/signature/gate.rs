//! The one runner of the supply-chain gates that look a digest up before it is pinned
//! (signatures, provenance): the lookups of a pass run concurrently, each within a budget; a
//! digest that passed is remembered process-wide, keyed by the rule's trust fingerprint, so
//! later passes make no request for it (refusals are not remembered: a digest signed or
//! attested after a pass refused it passes the next); and the planner asks [`Verdicts`]
//! whether a field may move. What a gate looks for, and how it decides, is its own
//! ([`Gate::look_up`]).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;

use crate::reference::{Digest, Reference, Subject};
use crate::registry::Client;

/// How many digests are looked up at once; the client's per-host limit applies below this.
const CONCURRENT_LOOKUPS: usize = 16;

/// How many passed digests a gate remembers; past it the memory starts over (a pass then
/// fetches again what it needs).
const MAX_REMEMBERED: usize = 50_000;

/// What a round of checks found, per result label of the gate's metric.
pub(crate) type CheckCounts = BTreeMap<&'static str, u64>;

/// A gate's refusal: one for a lookup that did not end in a verdict (a timeout, a digest
/// never checked in this pass), and its result label in the gate's metric.
pub trait Refused: Clone + Send + std::fmt::Display {
    fn lookup_failed(why: String) -> Self;
    fn label(&self) -> &'static str;
}

/// A gate's compiled entries: whether an image needs the gate at all.
pub trait Applies {
    fn applies(&self, reference: &Reference) -> bool;
}

/// Digests that passed, by (trust fingerprint, image, digest), with what they passed with.
/// Process-wide (one per gate) because the controller builds a new syncer for every pass and
/// every `PinnedRepository`; the fingerprint keeps entries with other trust apart.
#[derive(Debug)]
pub struct Memory<P> {
    passed: Mutex<HashMap<(String, Subject), P>>,
}

impl<P> Default for Memory<P> {
    fn default() -> Self {
        Memory {
            passed: Mutex::new(HashMap::new()),
        }
    }
}

impl<P: Clone> Memory<P> {
    fn get(&self, key: &(String, Subject)) -> Option<P> {
        self.lock().get(key).cloned()
    }

    fn insert(&self, key: (String, Subject), passed: P) {
        let mut memory = self.lock();
        if memory.len() >= MAX_REMEMBERED {
            memory.clear();
        }
        memory.insert(key, passed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Subject), P>> {
        self.passed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One gate: its entries, what a digest passes with, why it is refused, and how a digest is
/// looked up.
pub trait Gate {
    /// The compiled entries.
    type Rules: Applies;
    /// The entry that applies to one image.
    type Rule: Send + Sync;
    /// What a digest that passed passed with (who signed it, its provenance).
    type Passed: Clone + Send + Sync + 'static;
    type Refusal: Refused;

    /// As logs name the gate: `signature`, `provenance`.
    const NAME: &'static str;

    fn rule_for(rules: &Self::Rules, reference: &Reference) -> Option<Self::Rule>;
    /// Identifies the entry's trust material, so a remembered pass is reused only under it.
    fn fingerprint(rule: &Self::Rule) -> &str;
    fn memory() -> &'static Memory<Self::Passed>;
    /// How a pass is logged: `key keys/release.pub`, a builder.
    fn describe(passed: &Self::Passed) -> String;
    /// Looks `digest` of `reference`'s repository up under `rule`, and decides.
    fn look_up<'a>(
        client: &'a Client,
        rule: &'a Self::Rule,
        reference: &'a Reference,
        digest: &'a Digest,
    ) -> impl Future<Output = Result<Self::Passed, Self::Refusal>> + Send + 'a;
}

/// A gate's entries and what this pass learned about each digest it would pin: what the
/// planner needs to refuse a digest. The default requires nothing.
#[derive(Debug, Clone)]
pub struct Verdicts<R, P, E> {
    pub rules: R,
    pub checked: BTreeMap<Subject, Result<P, E>>,
}

impl<R: Default, P, E> Default for Verdicts<R, P, E> {
    fn default() -> Self {
        Verdicts::new(R::default())
    }
}

impl<R, P, E> Verdicts<R, P, E> {
    pub fn new(rules: R) -> Self {
        Verdicts {
            rules,
            checked: BTreeMap::new(),
        }
    }
}

impl<R: Applies, P: Clone, E: Refused> Verdicts<R, P, E> {
    /// Whether a field written `current` may move to `digest` of `wanted`: `None` when the
    /// gate does not apply (no entry matches, or the field is already at that digest),
    /// otherwise this pass's verdict (a refusal when it was never checked).
    pub(crate) fn decide(
        &self,
        current: &Reference,
        wanted: &Reference,
        digest: &Digest,
    ) -> Option<Result<P, E>> {
        if !self.rules.applies(wanted) || current.digest() == Some(digest) {
            return None;
        }
        Some(
            self.checked
                .get(&Subject::of(wanted, digest))
                .cloned()
                .unwrap_or_else(|| Err(E::lookup_failed("not checked in this pass".into()))),
        )
    }
}

/// Checks every digest of `wanted` the gate's entries apply to, concurrently, and records the
/// verdicts in `verdicts`; each lookup gets at most `budget`. Returns what was counted.
pub(crate) async fn check_all<G: Gate>(
    client: &Client,
    verdicts: &mut Verdicts<G::Rules, G::Passed, G::Refusal>,
    wanted: BTreeMap<Subject, (Reference, Digest)>,
    budget: Duration,
) -> CheckCounts {
    let mut counts = CheckCounts::new();
    let jobs: Vec<_> = wanted
        .into_iter()
        .filter_map(|(subject, (reference, digest))| {
            let rule = G::rule_for(&verdicts.rules, &reference)?;
            Some((subject, reference, digest, rule))
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(jobs.into_iter().map(
        |(subject, reference, digest, rule)| async move {
            let (verdict, label) = check::<G>(client, &rule, &reference, &digest, budget).await;
            (subject, verdict, label)
        },
    ))
    .buffer_unordered(CONCURRENT_LOOKUPS)
    .collect()
    .await;
    for (subject, verdict, label) in results {
        *counts.entry(label).or_insert(0) += 1;
        let (gate, image, digest) = (G::NAME, &subject.image, &subject.digest);
        match &verdict {
            Ok(passed) => {
                tracing::debug!(gate, image = %image, digest = %digest, by = %G::describe(passed), "verified")
            }
            Err(refusal) => {
                tracing::info!(gate, image = %image, digest = %digest, "{gate} refused: {refusal}")
            }
        }
        verdicts.checked.insert(subject, verdict);
    }
    counts
}

/// The verdict on one digest of `reference`'s repository under `rule`, and its metric label:
/// `cached` when it passed before under the same trust, else looked up within `budget`.
pub async fn check<G: Gate>(
    client: &Client,
    rule: &G::Rule,
    reference: &Reference,
    digest: &Digest,
    budget: Duration,
) -> (Result<G::Passed, G::Refusal>, &'static str) {
    let key = (
        G::fingerprint(rule).to_string(),
        Subject::of(reference, digest),
    );
    if let Some(passed) = G::memory().get(&key) {
        return (Ok(passed), "cached");
    }
    let looked = tokio::time::timeout(budget, G::look_up(client, rule, reference, digest)).await;
    let timed_out = || format!("no answer within {}s", budget.as_secs());
    match looked.unwrap_or_else(|_| Err(G::Refusal::lookup_failed(timed_out()))) {
        Ok(passed) => {
            G::memory().insert(key, passed.clone());
            (Ok(passed), "verified")
        }
        Err(refusal) => {
            let label = refusal.label();
            (Err(refusal), label)
        }
    }
}
