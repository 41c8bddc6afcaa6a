//! Prometheus metrics of the controller (`tagpin run`), served at `/metrics`.
//!
//! Labels are bounded on purpose: an outcome, a trigger, a registry host (hosts come from the
//! configured images), an HTTP status. Never a digest, an image tag or an error string, which
//! would grow without end.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicI64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::verify::judge::findings::Finding;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PassLabels {
    /// `ok`, `partial` (some images failed) or `error` (the pass could not run).
    pub outcome: String,
    /// `schedule` or `webhook`.
    pub trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryLabels {
    pub host: String,
    /// HTTP status, or `error` when no answer came.
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    pub host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// `opened` or `updated`.
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignatureLabels {
    /// `verified`, `cached` (verified in an earlier pass), `unsigned`, `refused`, `error`.
    pub result: String,
}

/// What a signature check is counted as ([`SignatureLabels::result`]).
pub(crate) const SIGNATURE_RESULTS: [&str; 5] =
    ["verified", "cached", "unsigned", "refused", "error"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgeLabels {
    /// `eligible` (old enough to pin) or `held` (younger than its `images.minimum_age`).
    pub result: String,
    /// What the age was counted from: `created` (the image config), `annotation`
    /// (`org.opencontainers.image.created`) or `first_seen` (the registry gave no usable time).
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvenanceLabels {
    /// `verified`, `cached` (verified in an earlier pass), `missing` (no attestation),
    /// `refused`, `error`.
    pub result: String,
}

/// What a provenance check is counted as ([`ProvenanceLabels::result`]).
pub(crate) const PROVENANCE_RESULTS: [&str; 5] =
    ["verified", "cached", "missing", "refused", "error"];

/// What a minimum age check is counted as ([`AgeLabels`]).
pub(crate) const AGE_RESULTS: [&str; 2] = ["eligible", "held"];
pub(crate) const AGE_SOURCES: [&str; 3] = ["created", "annotation", "first_seen"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    /// `slack`, `msteams` or `webhook`.
    pub kind: String,
    /// `sent`, `failed` (no success within the retries and time allowed, or refused by the
    /// receiver) or `refused` (not sent: plain HTTP where only HTTPS may go, a body too large).
    pub result: String,
}

/// What a notification is counted as ([`NotificationLabels::result`]).
pub(crate) const NOTIFICATION_RESULTS: [&str; 3] = ["sent", "failed", "refused"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub sender: String,
    /// `accepted`, `unauthorized`, `bad_payload`, `busy` (too many signed bodies being read).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    /// `converged`, `progressing`, `failed`.
    pub verdict: String,
    /// What was verified: `branch` (the target branch's tip, in commit mode), `merged` (a pull
    /// request merged into it, promotions included: what the branch now holds), or `open` (a
    /// pull request not merged yet). A Failed `branch` or `merged` verdict is the cluster not
    /// running what the branch pins.
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PromotionLabels {
    /// The stage promoted into.
    pub stage: String,
    /// `open`, `soaking`, `waiting`, `refused`, or `error` when the pass could not run.
    pub gate: String,
}

/// One `PinnedRepository`: bounded by the objects that exist (series of deleted objects are
/// removed), as Flux labels its per-object metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    pub namespace: String,
    pub name: String,
}

/// The Lease a replica competes for: replicas of one shard share one, so "who leads" is summed
/// per Lease. Empty without leader election (Prometheus then drops the label).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    pub lease: String,
}

/// What an audit found ([`crate::verify::judge::findings::Finding`]): seven words, never a
/// workload or an image.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FindingLabels {
    /// `pinned`, `tag-only`, `not-in-git`, `missing`, `unread`, `drift` or `mixed`.
    pub finding: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// What failed, as a fixed word (`forge`, `git`, `kubernetes`, `configuration`,
    /// `no_plan_block`); the message itself goes to the log.
    pub kind: String,
}

/// At most this many registry hosts are labelled apart; the others are `other`.
pub(crate) const MAX_HOST_LABELS: usize = 64;
const OTHER_HOSTS: &str = "other";
/// What a webhook delivery is counted as ([`WebhookLabels::result`]).
pub(crate) const WEBHOOK_RESULTS: [&str; 4] = ["accepted", "unauthorized", "bad_payload", "busy"];
/// Every verdict.
const VERDICTS: [crate::verify::judge::verdict::State; 4] = [
    crate::verify::judge::verdict::State::Converged,
    crate::verify::judge::verdict::State::Progressing,
    crate::verify::judge::verdict::State::Failed,
    crate::verify::judge::verdict::State::Unverified,
];
/// What a verification is counted as being of ([`VerdictLabels::source`]).
pub(crate) const VERIFIED_SOURCES: [&str; 3] = ["branch", "merged", "open"];
/// What a promotion pass is counted as ([`PromotionLabels::gate`]).
pub(crate) const PROMOTION_GATES: [&str; 5] = ["open", "soaking", "waiting", "refused", "error"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// A promotion stage, or the branch's name without stages.
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeploymentLabels {
    pub stage: String,
    /// `converged`, `failed`, `reverted` or `held` (`src/delivery/`).
    pub outcome: String,
}

/// A branch's tip and notes ref, when a repository's delivery history was last read.
pub(crate) type ReadAt = (Option<git2::Oid>, Option<git2::Oid>);

/// A histogram family whose every series has the same buckets.
pub(crate) type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Delivery times: one minute to about eleven days, doubling.
fn delivery_buckets() -> Histogram {
    Histogram::new(exponential_buckets(60.0, 2.0, 15))
}

/// Every metric of the controller, registered once.
pub struct Metrics {
    registry: Registry,
    pub passes: Family<PassLabels, Counter>,
    pub pass_seconds: Histogram,
    pub resolve_seconds: Histogram,
    pub registry_requests: Family<RegistryLabels, Counter>,
    pub rate_limit_remaining: Family<HostLabels, Gauge>,
    pub commits: Counter,
    /// Git mirrors found damaged, moved aside and cloned again ([`crate::git::Mirror::repair`]).
    pub mirror_repairs: Counter,
    /// Ref listings asked of Git remotes before a fetch ([`crate::git::Transfers`]).
    pub git_ref_listings: Counter,
    /// Fetches from Git remotes: only where a ref listing showed a followed branch moved.
    pub git_fetches: Counter,
    pub pull_requests: Family<ActionLabels, Counter>,
    pub webhooks: Family<WebhookLabels, Counter>,
    /// Signature checks of digests about to be pinned (`images.signatures`), by result.
    pub signature_checks: Family<SignatureLabels, Counter>,
    /// Minimum age checks of digests about to be pinned (`images.minimum_age`), by result and
    /// what the age was counted from.
    pub minimum_age_checks: Family<AgeLabels, Counter>,
    /// Build provenance checks of digests about to be pinned (`images.provenance`), by result.
    pub provenance_checks: Family<ProvenanceLabels, Counter>,
    /// Accepted deliveries served by a pass another delivery had already asked for: during a
    /// pass, or within the webhook window after one started (`--webhook-window`).
    pub webhook_coalesced: Counter,
    pub verdicts: Family<VerdictLabels, Counter>,
    /// Verifications that could not be made, one per pull request or commit and round; the
    /// others of the round go on.
    pub verification_errors: Family<ErrorLabels, Counter>,
    pub promotions: Family<PromotionLabels, Counter>,
    /// Workloads of the namespaces the configuration deploys to, by what the last audit of the
    /// target branch's tip found (`tagpin run`, after each verification round); a workload
    /// counts once under each finding any of its containers has.
    pub audit_workloads: Family<FindingLabels, Gauge>,
    /// Unix time of the last pass that ran without failures; `time() - this` is the age.
    pub last_success: Gauge<i64, AtomicI64>,
    /// Registry clients kept (the operator keeps one per distinct registry settings and
    /// credentials, and evicts idle ones).
    pub registry_clients: Gauge,
    /// Unix time each object's last reconcile ended (the operator): a reconcile that changes
    /// nothing writes nothing to the object, so this is where a pass shows.
    pub object_reconciled: Family<ObjectLabels, Gauge<i64, AtomicI64>>,
    /// `--interval`, in seconds: alerts count missed passes in intervals.
    pub pass_interval: Gauge,
    /// 1 while this process acts (it holds the Lease, or runs without leader election), 0
    /// while it stands by: summed over the replicas of a Lease, 0 means nobody passes.
    pub leader: Family<LeaseLabels, Gauge>,
    /// Lead times of converged changes, from the digest's build to Converged (`src/delivery/`).
    pub lead_time: Histograms<StageLabels>,
    /// Deployments by stage and final outcome, each counted once per process.
    pub deployments: Family<DeploymentLabels, Counter>,
    /// Times from a Failed verdict to the next Converged one, per stage.
    pub time_to_restore: Histograms<StageLabels>,
    /// What the delivery metrics already observed in this process (`src/delivery/observe.rs`).
    pub delivery_observed: Mutex<BTreeSet<String>>,
    /// Per repository, the branch's tip and notes ref at the last reading of its history.
    pub delivery_read_at: Mutex<BTreeMap<String, ReadAt>>,
    /// Messages to notification receivers, by kind and result ([`crate::notify`]).
    pub notifications: Family<NotificationLabels, Counter>,
    /// Registry request counts already added to `registry_requests`, to add only the change.
    seen_requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// The registry hosts given a label of their own, first come first labelled.
    labelled_hosts: Mutex<BTreeSet<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tagpin");
        let minimum_age_checks = minimum_age_checks(&mut registry);
        let provenance_checks = provenance_checks(&mut registry);
        let mut metrics = Metrics {
            registry,
            passes: Family::default(),
            pass_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 14)),
            resolve_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            registry_requests: Family::default(),
            rate_limit_remaining: Family::default(),
            commits: Counter::default(),
            mirror_repairs: Counter::default(),
            git_ref_listings: Counter::default(),
            git_fetches: Counter::default(),
            pull_requests: Family::default(),
            webhooks: Family::default(),
            signature_checks: Family::default(),
            minimum_age_checks,
            provenance_checks,
            webhook_coalesced: Counter::default(),
            verdicts: Family::default(),
            verification_errors: Family::default(),
            promotions: Family::default(),
            audit_workloads: Family::default(),
            last_success: Gauge::<i64, AtomicI64>::default(),
            registry_clients: Gauge::default(),
            object_reconciled: Family::default(),
            pass_interval: Gauge::default(),
            leader: Family::default(),
            lead_time: Family::new_with_constructor(delivery_buckets),
            deployments: Family::default(),
            time_to_restore: Family::new_with_constructor(delivery_buckets),
            delivery_observed: Mutex::default(),
            delivery_read_at: Mutex::default(),
            notifications: Family::default(),
            seen_requests: Mutex::default(),
            labelled_hosts: Mutex::default(),
        };
        metrics.register_delivery();
        metrics.register_pinning();
        metrics.register_outcomes();
        metrics.zero_webhooks();
        for result in SIGNATURE_RESULTS {
            let _ = metrics.signature_checks.get_or_create(&SignatureLabels {
                result: result.to_string(),
            });
        }
        metrics
    }

    /// Registers the delivery metrics (DORA, `src/delivery/`).
    fn register_delivery(&mut self) {
        let registry = &mut self.registry;
        registry.register_with_unit(
            "lead_time",
            "From a digest's build to Converged in a stage, per converged change",
            prometheus_client::registry::Unit::Seconds,
            self.lead_time.clone(),
        );
        registry.register(
            "deployments",
            "Pin and promotion commits landed, by stage and final outcome",
            self.deployments.clone(),
        );
        registry.register_with_unit(
            "time_to_restore",
            "From a stage's Failed verdict to its next Converged verdict",
            prometheus_client::registry::Unit::Seconds,
            self.time_to_restore.clone(),
        );
    }

    /// The series of notifications of `kind` at zero, so an alert sees the first failure.
    pub fn zero_notifications(&self, kind: &str) {
        for result in NOTIFICATION_RESULTS {
            let _ = self.notifications.get_or_create(&NotificationLabels {
                kind: kind.to_string(),
                result: result.to_string(),
            });
        }
    }

    /// One message of `kind` counted with its `result` (one of [`NOTIFICATION_RESULTS`]).
    pub fn notified(&self, kind: &str, result: &str) {
        inc(
            &self.notifications,
            NotificationLabels {
                kind: kind.to_string(),
                result: result.to_string(),
            },
        );
    }

    /// Registers what a pass does: passes, registry and Git traffic, commits, pull requests,
    /// webhook deliveries and signature checks.
    fn register_pinning(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "passes",
            "Sync passes by outcome and trigger",
            self.passes.clone(),
        );
        registry.register(
            "pass_duration_seconds",
            "Wall time of a sync pass",
            self.pass_seconds.clone(),
        );
        registry.register(
            "resolve_duration_seconds",
            "Wall time of the registry resolution phase of a pass",
            self.resolve_seconds.clone(),
        );
        registry.register(
            "registry_requests",
            "Registry HTTP requests by host and status",
            self.registry_requests.clone(),
        );
        registry.register(
            "registry_rate_limit_remaining",
            "Requests left in the registry's rate-limit window, where it reports one",
            self.rate_limit_remaining.clone(),
        );
        registry.register("commits", "Commits pushed", self.commits.clone());
        registry.register(
            "mirror_repairs",
            "Git mirrors in the cache directory found damaged (a missing or corrupt object, ref \
             or config), moved aside and cloned again",
            self.mirror_repairs.clone(),
        );
        registry.register(
            "git_ref_listings",
            "Ref listings asked of Git remotes, each before a fetch: a pass over an unchanged \
             repository fetches nothing",
            self.git_ref_listings.clone(),
        );
        registry.register(
            "git_fetches",
            "Fetches from Git remotes, made when a ref listing showed a followed branch moved",
            self.git_fetches.clone(),
        );
        registry.register(
            "pull_requests",
            "Pull requests opened or updated",
            self.pull_requests.clone(),
        );
        registry.register(
            "webhook_deliveries",
            "Registry webhook deliveries",
            self.webhooks.clone(),
        );
        registry.register(
            "webhook_deliveries_coalesced",
            "Accepted webhook deliveries served by a pass another delivery had asked for \
             (during a pass, or within the webhook window)",
            self.webhook_coalesced.clone(),
        );
        registry.register(
            "signature_checks",
            "Signature checks of digests about to be pinned, by result",
            self.signature_checks.clone(),
        );
    }

    /// Registers what tagpin found and how it runs: verdicts, promotions, the audit, the last
    /// good pass, registry clients, reconciles, the interval and the Lease.
    fn register_outcomes(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "verifications",
            "Verification verdicts",
            self.verdicts.clone(),
        );
        registry.register(
            "notifications",
            "Messages to notification receivers by kind (slack, msteams, webhook) and result \
             (sent, failed, refused)",
            self.notifications.clone(),
        );
        registry.register(
            "verification_errors",
            "Verifications of one pull request or commit that could not be made, by kind",
            self.verification_errors.clone(),
        );
        registry.register(
            "promotions",
            "Promotion passes by target stage and gate",
            self.promotions.clone(),
        );
        registry.register(
            "audit_workloads",
            "Workloads of the namespaces the configuration deploys to, by what the last audit \
             found (pinned, tag-only, not-in-git, missing, unread, drift, mixed); a workload \
             counts once under each finding of any of its containers",
            self.audit_workloads.clone(),
        );
        registry.register(
            "last_success_timestamp_seconds",
            "Unix time of the last pass without failures",
            self.last_success.clone(),
        );
        registry.register(
            "registry_clients",
            "Registry clients kept, one per distinct registry settings and credentials",
            self.registry_clients.clone(),
        );
        registry.register(
            "object_last_reconcile_timestamp_seconds",
            "Unix time a PinnedRepository's last reconcile ended",
            self.object_reconciled.clone(),
        );
        registry.register(
            "pass_interval_seconds",
            "Time between scheduled passes (--interval)",
            self.pass_interval.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica acts (holds the Lease, or runs without leader election), \
             0 while it stands by, by Lease",
            self.leader.clone(),
        );
    }

    /// Counts what `mirror` did since it was last counted: repairs, ref listings and fetches.
    pub(crate) fn observe_mirror(&self, mirror: &crate::git::Mirror) {
        self.mirror_repairs.inc_by(mirror.take_repairs());
        let transfers = mirror.take_transfers();
        self.git_ref_listings.inc_by(transfers.ref_listings);
        self.git_fetches.inc_by(transfers.fetches);
    }

    /// Adds a pass's minimum age checks (see [`crate::sync::SyncReport::age_checks`]).
    pub(crate) fn observe_age_checks(&self, counts: &crate::age::CheckCounts) {
        for ((result, source), count) in counts {
            self.minimum_age_checks
                .get_or_create(&AgeLabels {
                    result: result.to_string(),
                    source: source.to_string(),
                })
                .inc_by(*count);
        }
    }

    /// Adds a pass's provenance checks (see [`crate::sync::SyncReport::provenance_checks`]).
    pub(crate) fn observe_provenance_checks(&self, counts: &crate::provenance::fetch::CheckCounts) {
        for (result, count) in counts {
            self.provenance_checks
                .get_or_create(&ProvenanceLabels {
                    result: result.to_string(),
                })
                .inc_by(*count);
        }
    }

    /// Adds a pass's signature checks (see [`crate::sync::SyncReport::signature_checks`]).
    pub(crate) fn observe_signature_checks(&self, counts: &crate::signature::fetch::CheckCounts) {
        for (result, count) in counts {
            self.signature_checks
                .get_or_create(&SignatureLabels {
                    result: result.to_string(),
                })
                .inc_by(*count);
        }
    }

    /// Creates every delivery series at zero (each sender, each result): the first refused
    /// delivery must show as an increase, and `increase()` cannot see a series that is born
    /// at 1. The alerts in `deploy/monitoring/alerts/` count on it.
    fn zero_webhooks(&self) {
        for sender in crate::webhook::Sender::ALL {
            for result in WEBHOOK_RESULTS {
                let _ = self.webhooks.get_or_create(&WebhookLabels {
                    sender: sender.name().to_string(),
                    result: result.to_string(),
                });
            }
        }
    }

    /// Creates the verification series at zero, for a process that verifies (`tagpin run`
    /// with a cluster): a Failed verdict on the branch is counted once, and must show as an
    /// increase.
    pub fn zero_verifications(&self) {
        for verdict in VERDICTS {
            for source in VERIFIED_SOURCES {
                let _ = self.verdicts.get_or_create(&VerdictLabels {
                    verdict: verdict.as_str().to_string(),
                    source: source.to_string(),
                });
            }
        }
    }

    /// Creates the promotion series of each stage promoted into at zero, so that the first
    /// refused promotion shows as an increase.
    pub fn zero_promotions<'s>(&self, stages: impl IntoIterator<Item = &'s str>) {
        for stage in stages {
            for gate in PROMOTION_GATES {
                let _ = self.promotions.get_or_create(&PromotionLabels {
                    stage: stage.to_string(),
                    gate: gate.to_string(),
                });
            }
        }
    }

    /// Sets every finding's series of `tagpin_audit_workloads` to what the audit counted (zero
    /// for a finding it did not make), so a series never keeps an older audit's count.
    pub fn set_audit(&self, counts: &BTreeMap<Finding, usize>) {
        for finding in Finding::ALL {
            let n = counts.get(&finding).copied().unwrap_or(0);
            self.audit_workloads
                .get_or_create(&FindingLabels {
                    finding: finding.as_str().to_string(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// This replica acts (`true`) or stands by, for the Lease `lease` ("" without election).
    pub fn set_leader(&self, lease: &str, acting: bool) {
        self.leader
            .get_or_create(&LeaseLabels {
                lease: lease.to_string(),
            })
            .set(i64::from(acting));
    }

    /// Adds what the registry client counted since the last call.
    pub(crate) fn observe_registry(&self, client: &crate::registry::Client) {
        self.observe_registry_counts(client.request_counts());
        for (host, _) in client.request_counts().into_iter().map(|(key, _)| key) {
            if let Some(remaining) = client.rate_limit_remaining(&host) {
                if let Some(n) = remaining
                    .split(';')
                    .next()
                    .and_then(|n| n.trim().parse::<i64>().ok())
                {
                    self.rate_limit_remaining
                        .get_or_create(&HostLabels { host })
                        .set(n);
                }
            }
        }
    }

    /// Registry requests answered so far by (host, status), as totals that only grow: the
    /// operator sums them over its registry clients.
    pub(crate) fn observe_registry_counts(&self, counts: Vec<((String, u16), u64)>) {
        let mut seen = self.seen_requests.lock().unwrap_or_else(|p| p.into_inner());
        for ((host, status), count) in counts {
            let before = seen.insert((host.clone(), status), count).unwrap_or(0);
            let host = self.host_label(host);
            let status = if status == 0 {
                "error".to_string()
            } else {
                status.to_string()
            };
            self.registry_requests
                .get_or_create(&RegistryLabels {
                    host: host.clone(),
                    status,
                })
                .inc_by(count.saturating_sub(before));
        }
    }

    /// The label of `host`: registry hosts come from configuration, in the operator from every
    /// tenant's, so past [`MAX_HOST_LABELS`] the hosts seen later are counted together.
    fn host_label(&self, host: String) -> String {
        let mut labelled = self
            .labelled_hosts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if labelled.contains(&host) {
            return host;
        }
        if labelled.len() < MAX_HOST_LABELS {
            labelled.insert(host.clone());
            return host;
        }
        OTHER_HOSTS.to_string()
    }

    /// The text exposition format Prometheus scrapes.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// `tagpin_provenance_checks_total`, registered, with every series at zero: the first refused
/// digest must show as an increase.
fn provenance_checks(registry: &mut Registry) -> Family<ProvenanceLabels, Counter> {
    let checks = Family::<ProvenanceLabels, Counter>::default();
    registry.register(
        "provenance_checks",
        "Build provenance checks of digests about to be pinned, by result",
        checks.clone(),
    );
    for result in PROVENANCE_RESULTS {
        let _ = checks.get_or_create(&ProvenanceLabels {
            result: result.to_string(),
        });
    }
    checks
}

/// `tagpin_minimum_age_checks_total`, registered, with every series at zero: the first held
/// digest must show as an increase.
fn minimum_age_checks(registry: &mut Registry) -> Family<AgeLabels, Counter> {
    let checks = Family::<AgeLabels, Counter>::default();
    registry.register(
        "minimum_age_checks",
        "Minimum age checks of digests about to be pinned, by result and by what the age was \
         counted from",
        checks.clone(),
    );
    for result in AGE_RESULTS {
        for source in AGE_SOURCES {
            let _ = checks.get_or_create(&AgeLabels {
                result: result.to_string(),
                source: source.to_string(),
            });
        }
    }
    checks
}

/// `Counter::inc` for a labelled family, spelled once.
pub fn inc<L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug>(
    family: &Family<L, Counter>,
    labels: L,
) {
    family.get_or_create(&labels).inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts the exposition `text` holds each of `lines`.
    #[track_caller]
    fn assert_has(text: &str, lines: &[&str]) {
        for line in lines {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn an_audit_sets_every_finding_and_forgets_the_last_counts() {
        let metrics = Metrics::new();
        metrics.set_audit(&BTreeMap::from([(Finding::Mixed, 2), (Finding::Pinned, 5)]));
        let text = metrics.encode();
        assert_has(
            &text,
            &[
                "tagpin_audit_workloads{finding=\"mixed\"} 2",
                "tagpin_audit_workloads{finding=\"tag-only\"} 0",
            ],
        );
        metrics.set_audit(&BTreeMap::from([(Finding::Pinned, 7)]));
        let text = metrics.encode();
        assert_has(
            &text,
            &[
                "tagpin_audit_workloads{finding=\"mixed\"} 0",
                "tagpin_audit_workloads{finding=\"pinned\"} 7",
            ],
        );
        let series = text
            .lines()
            .filter(|l| l.starts_with("tagpin_audit_workloads{"))
            .count();
        assert_eq!(series, Finding::ALL.len());
    }

    #[test]
    fn signature_checks_are_counted_by_result_from_zero() {
        let metrics = Metrics::new();
        let text = metrics.encode();
        for result in SIGNATURE_RESULTS {
            let line = format!("tagpin_signature_checks_total{{result=\"{result}\"}} 0");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        metrics.observe_signature_checks(&BTreeMap::from([("verified", 3), ("unsigned", 1)]));
        metrics.observe_signature_checks(&BTreeMap::from([("verified", 2)]));
        let text = metrics.encode();
        assert_has(
            &text,
            &[
                "tagpin_signature_checks_total{result=\"verified\"} 5",
                "tagpin_signature_checks_total{result=\"unsigned\"} 1",
            ],
        );
    }

    #[test]
    fn provenance_checks_are_counted_by_result_from_zero() {
        let metrics = Metrics::new();
        let text = metrics.encode();
        for result in PROVENANCE_RESULTS {
            let line = format!("tagpin_provenance_checks_total{{result=\"{result}\"}} 0");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        metrics.observe_provenance_checks(&BTreeMap::from([("refused", 2), ("verified", 1)]));
        metrics.observe_provenance_checks(&BTreeMap::from([("refused", 1)]));
        let text = metrics.encode();
        assert_has(
            &text,
            &["tagpin_provenance_checks_total{result=\"refused\"} 3"],
        );
    }

    #[test]
    fn minimum_age_checks_are_counted_by_result_and_source_from_zero() {
        let metrics = Metrics::new();
        let text = metrics.encode();
        for result in AGE_RESULTS {
            for source in AGE_SOURCES {
                let line = format!(
                    "tagpin_minimum_age_checks_total{{result=\"{result}\",source=\"{source}\"}} 0"
                );
                assert!(text.contains(&line), "{line} in\n{text}");
            }
        }
        metrics.observe_age_checks(&BTreeMap::from([(("held", "created"), 2)]));
        metrics.observe_age_checks(&BTreeMap::from([(("held", "created"), 1)]));
        let text = metrics.encode();
        assert_has(
            &text,
            &["tagpin_minimum_age_checks_total{result=\"held\",source=\"created\"} 3"],
        );
    }

    #[test]
    fn registry_hosts_past_the_bound_are_counted_together() {
        let metrics = Metrics::new();
        let counts: Vec<((String, u16), u64)> = (0..MAX_HOST_LABELS + 10)
            .map(|i| ((format!("registry-{i:03}.example"), 200), 1))
            .collect();
        metrics.observe_registry_counts(counts);
        let text = metrics.encode();
        let labelled = text
            .lines()
            .filter(|l| l.starts_with("tagpin_registry_requests_total{"))
            .count();
        assert_eq!(labelled, MAX_HOST_LABELS + 1, "{text}");
        assert!(text.contains("tagpin_registry_requests_total{host=\"other\",status=\"200\"} 10"));
        // A host labelled once stays labelled.
        metrics.observe_registry_counts(vec![(("registry-000.example".into(), 200), 3)]);
        assert!(metrics.encode().contains(
            "tagpin_registry_requests_total{host=\"registry-000.example\",status=\"200\"} 3"
        ));
    }
}
