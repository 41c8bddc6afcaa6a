//! Leader election on a `coordination.k8s.io/v1` Lease, for running two or more replicas of
//! `tagpin run` (or the operator) where only one may act: two leaders would both push pin
//! commits and answer the same pull requests.
//!
//! The semantics are client-go's `leaderelection` with a `LeaseLock`, so that tagpin behaves
//! like every other controller on the cluster and `kubectl get lease` reads the same way:
//!
//! - A candidate reads the Lease every *retry period* (jittered by up to 1.2×). It takes the
//!   Lease when it is missing, released (no `holderIdentity`), or expired: the holder's
//!   record has not changed for *lease duration* as seen on this process's own monotonic
//!   clock (never by comparing `renewTime` with the local wall clock, so clock skew between
//!   nodes does not matter). A takeover bumps `leaseTransitions` and sets `acquireTime`.
//! - Every write is a create or an update carrying the `resourceVersion` read just before:
//!   of two candidates racing for an expired Lease, the API server lets exactly one win
//!   (the other gets 409 Conflict or AlreadyExists).
//! - The leader renews (`renewTime`) every retry period. If it cannot renew for *renew
//!   deadline* (shorter than the lease duration, so it stops before anyone may take over),
//!   or learns that someone else holds the Lease (a 409 on renew, another holder read back),
//!   leadership is lost: [`Leadership::lost`] resolves, and the caller must stop acting at
//!   once. `tagpin run` then exits non-zero; Kubernetes restarts the pod, which comes back as
//!   a candidate. Exiting is simpler and safer than unwinding work that may hold a
//!   half-pushed branch: the next leader's pass completes it, as after any crash.
//! - On graceful shutdown the leader releases the Lease ([`Leadership::release`]): it clears
//!   `holderIdentity` and sets a one-second duration, and a standby takes over at its next
//!   retry instead of waiting out the lease duration.
//!
//! The decision is pure ([`Candidate`], given the Lease read and the time); the I/O around it
//! is [`Elector`] and [`Leadership`].
//!
//! No crate fits: `kube-leader-election` needs kube 4, and `kube-lease-manager` (kube 5)
//! renews with strategic-merge and apply patches that carry no `resourceVersion` and has no
//! renew deadline, so two replicas could both believe they lead for a while.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cluster::{ClientError, HomeCluster};
use crate::config::DurationError;

/// client-go's jitter on a candidate's retries (`wait.JitterUntil` with 1.2), so candidates
/// started together do not hit the API server in step.
const JITTER_FACTOR: f64 = 1.2;

/// Where a pod's own namespace is, in-cluster.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// What to elect on and how fast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionConfig {
    pub lease_name: String,
    pub namespace: String,
    /// This process's name in `holderIdentity`: unique per process ([`default_identity`]).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// client-go's checks: the leader must give up (renew deadline) before anyone may take
    /// over (lease duration), and must get more than one try (retry period) before that.
    /// The Lease stores whole seconds.
    pub fn validate(&self) -> Result<(), LeaderError> {
        let bad = |message: String| Err(LeaderError::Config(message));
        if self.lease_name.is_empty() {
            return bad("the Lease name is empty".into());
        }
        if self.namespace.is_empty() {
            return bad("the Lease namespace is empty".into());
        }
        if self.identity.is_empty() {
            return bad("the identity is empty".into());
        }
        if self.lease_duration < Duration::from_secs(1) || self.lease_duration.subsec_nanos() != 0 {
            return bad(format!(
                "lease duration {:?} must be a whole number of seconds, at least 1 \
                 (leaseDurationSeconds is an integer)",
                self.lease_duration
            ));
        }
        if self.renew_deadline >= self.lease_duration {
            return bad(format!(
                "renew deadline {:?} must be shorter than the lease duration {:?}, or a leader \
                 could still act after another took over",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return bad(format!(
                "renew deadline {:?} must be longer than {JITTER_FACTOR} × the retry period {:?}",
                self.renew_deadline, self.retry_period
            ));
        }
        if self.retry_period.is_zero() {
            return bad("the retry period must be longer than zero".into());
        }
        Ok(())
    }
}

/// Why leader election could not run, or one try at the Lease failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// An [`ElectionConfig`] that breaks client-go's rules; the message says which.
    #[error("leader election: {0}")]
    Config(String),
    /// No Kubernetes configuration found (in-cluster or `KUBECONFIG`), or no client could be
    /// made of it. Boxed: kube's errors are large, and every `Result` of the CLI carries this
    /// one.
    #[error("leader election: Kubernetes client: {0}")]
    Client(#[source] Box<ClientError>),
    /// The API server did not answer a `request` (read, write, release) in time.
    #[error(
        "leader election: Lease {namespace}/{name}: no answer to the {request} within {within:?}"
    )]
    NoAnswer {
        namespace: String,
        name: String,
        request: &'static str,
        within: Duration,
    },
    #[error("leader election: Lease {namespace}/{name}: {request}: {source}")]
    Lease {
        namespace: String,
        name: String,
        request: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    /// The task renewing the Lease panicked or was cancelled.
    #[error("leader election: the Lease renewal task failed: {0}")]
    RenewalTask(#[source] tokio::task::JoinError),
}

/// `POD_NAME` (from the downward API) or the host name, then `_` and a random suffix:
/// unique even when a restarted pod keeps its name, as client-go's `hostname_uuid`.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "tagpin".to_string());
    format!("{base}_{:016x}", random_u64())
}

/// The namespace the Lease goes in when no flag names one: `POD_NAMESPACE`, else the
/// service account's namespace file. `None` outside a cluster.
pub fn default_namespace() -> Option<String> {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
                .ok()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
        })
}

/// A duration flag: `500ms`, or what [`crate::config::parse_duration`] takes (`2s`, `1m`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    match text.trim().strip_suffix("ms") {
        Some(millis) => millis
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| DurationError::NotAShortDuration {
                text: text.to_string(),
            }),
        None => crate::config::parse_duration(text),
    }
}

/// Randomness for the identity suffix and the retry jitter, without a crate: std's hasher
/// keys are random per process.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

// ---------------------------------------------------------------------------
// The decision
// ---------------------------------------------------------------------------

/// The part of a Lease the election reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `None` when released (an empty `holderIdentity` counts as none).
    pub holder: Option<String>,
    pub lease_duration: Duration,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub transitions: i32,
}

impl Record {
    pub fn from_spec(spec: &LeaseSpec) -> Record {
        Record {
            holder: spec.holder_identity.clone().filter(|h| !h.is_empty()),
            lease_duration: Duration::from_secs(
                spec.lease_duration_seconds.unwrap_or(0).max(0) as u64
            ),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    pub fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: self.holder.clone(),
            lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }
}

/// What to do after reading the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No Lease yet: create it, holding it.
    Create(Record),
    /// Write this record over the one read (a renewal, or a takeover).
    Update(Record),
    /// Someone else holds a valid Lease: try again later.
    Wait { holder: String },
}

/// One process's view of the election: the last record read, and when (on the local
/// monotonic clock) it last changed.
#[derive(Debug, Clone)]
pub struct Candidate {
    identity: String,
    lease_duration: Duration,
    observed: Option<(Record, Instant)>,
}

impl Candidate {
    pub fn new(identity: &str, lease_duration: Duration) -> Candidate {
        Candidate {
            identity: identity.to_string(),
            lease_duration,
            observed: None,
        }
    }

    /// Notes the record read (or written) at `now`. The observed time moves only when the
    /// record changed: a holder that stopped renewing shows as the same record.
    pub fn observe(&mut self, record: Option<&Record>, now: Instant) {
        match (record, &self.observed) {
            (None, _) => self.observed = None,
            (Some(record), Some((seen, _))) if seen == record => {}
            (Some(record), _) => self.observed = Some((record.clone(), now)),
        }
    }

    /// Whether the last record seen names this process.
    pub fn is_leader(&self) -> bool {
        self.observed
            .as_ref()
            .and_then(|(r, _)| r.holder.as_deref())
            == Some(self.identity.as_str())
    }

    /// What to do at `now` (monotonic), stamping writes with `wall` (the `MicroTime`s).
    pub fn decide(&self, now: Instant, wall: Timestamp) -> Decision {
        let Some((record, seen_at)) = &self.observed else {
            return Decision::Create(Record {
                holder: Some(self.identity.clone()),
                lease_duration: self.lease_duration,
                acquire_time: Some(wall),
                renew_time: Some(wall),
                transitions: 0,
            });
        };
        if let Some(holder) = record.holder.as_deref() {
            let valid = *seen_at + record.lease_duration > now;
            if holder != self.identity && valid {
                return Decision::Wait {
                    holder: holder.to_string(),
                };
            }
        }
        let renewal = self.is_leader();
        Decision::Update(Record {
            holder: Some(self.identity.clone()),
            lease_duration: self.lease_duration,
            acquire_time: if renewal {
                record.acquire_time.or(Some(wall))
            } else {
                Some(wall)
            },
            renew_time: Some(wall),
            transitions: if renewal {
                record.transitions
            } else {
                record.transitions + 1
            },
        })
    }

    /// The record that gives the Lease up: no holder, one second left, so a standby takes it
    /// at its next try (client-go's release).
    pub fn released(&self, wall: Timestamp) -> Option<Record> {
        let (record, _) = self.observed.as_ref()?;
        self.is_leader().then(|| Record {
            holder: None,
            lease_duration: Duration::from_secs(1),
            acquire_time: Some(wall),
            renew_time: Some(wall),
            transitions: record.transitions,
        })
    }
}

// ---------------------------------------------------------------------------
// The I/O
// ---------------------------------------------------------------------------

/// A candidate for the Lease: [`Elector::acquire`] waits until it leads.
pub struct Elector {
    api: Api<Lease>,
    config: ElectionConfig,
    candidate: Candidate,
    /// The Lease as last read or written, for the `resourceVersion` of the next update.
    current: Option<Lease>,
}

/// The outcome of one try.
enum Attempt {
    Leading,
    /// Someone else holds it, or won the race for it.
    NotLeading {
        holder: Option<String>,
    },
}

impl Elector {
    pub fn new(client: Client, config: ElectionConfig) -> Result<Elector, LeaderError> {
        config.validate()?;
        Ok(Elector {
            api: Api::namespaced(client, &config.namespace),
            candidate: Candidate::new(&config.identity, config.lease_duration),
            config,
            current: None,
        })
    }

    /// A client for the cluster tagpin runs in (in-cluster, else `KUBECONFIG`), whose
    /// requests give up after `timeout`.
    /// kube's own retry is off: a renewal that fails must be known at once, within the
    /// renew deadline, and the election retries on its own period.
    pub async fn client(timeout: Duration) -> Result<Client, LeaderError> {
        let failed = |e| LeaderError::Client(Box::new(e));
        let home = HomeCluster::infer(timeout).await.map_err(failed)?;
        home.requests(false).map_err(failed)
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// The Lease's name (`--leader-elect-lease-name`).
    pub fn lease_name(&self) -> &str {
        &self.config.lease_name
    }

    /// Waits until this process holds the Lease, trying every retry period (jittered).
    /// Failed tries are logged and retried: an API server that is down for a while only
    /// delays the start. Cancel by dropping the future (a stop signal while standing by).
    pub async fn acquire(mut self) -> Leadership {
        let mut last_holder = None;
        loop {
            let timeout = self.config.renew_deadline;
            match self.attempt(timeout).await {
                Ok(Attempt::Leading) => break,
                Ok(Attempt::NotLeading { holder }) => {
                    if holder != last_holder {
                        tracing::info!(
                            "leader election: standing by, Lease {}/{} is held by {}",
                            self.config.namespace,
                            self.config.lease_name,
                            holder.as_deref().unwrap_or("nobody")
                        );
                        last_holder = holder;
                    }
                }
                Err(e) => tracing::warn!("{e}; retrying"),
            }
            let jitter = 1.0 + JITTER_FACTOR * (random_u64() % 1000) as f64 / 1000.0;
            tokio::time::sleep(self.config.retry_period.mul_f64(jitter)).await;
        }
        tracing::info!(
            "leader election: {} leads (Lease {}/{})",
            self.config.identity,
            self.config.namespace,
            self.config.lease_name
        );
        Leadership::start(self)
    }

    /// One read and, when the decision says so, one write; each request gives up after
    /// `timeout`.
    async fn attempt(&mut self, timeout: Duration) -> Result<Attempt, LeaderError> {
        let read = tokio::time::timeout(timeout, self.api.get_opt(&self.config.lease_name))
            .await
            .map_err(|_| self.no_answer("read", timeout))?
            .map_err(|e| self.failed("read", e))?;
        let record = read
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .map(Record::from_spec);
        // A Lease without a spec is one nobody holds: treat it as released.
        let record = match (&read, record) {
            (Some(_), None) => Some(Record {
                holder: None,
                lease_duration: Duration::ZERO,
                acquire_time: None,
                renew_time: None,
                transitions: 0,
            }),
            (_, record) => record,
        };
        self.candidate.observe(record.as_ref(), Instant::now());
        self.current = read;
        let written = match self.candidate.decide(Instant::now(), Timestamp::now()) {
            Decision::Wait { holder } => {
                return Ok(Attempt::NotLeading {
                    holder: Some(holder),
                })
            }
            Decision::Create(record) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.lease_name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(record.to_spec()),
                };
                tokio::time::timeout(timeout, self.api.create(&PostParams::default(), &lease)).await
            }
            Decision::Update(record) => {
                let mut lease = self.current.clone().unwrap_or_default();
                lease.spec = Some(record.to_spec());
                tokio::time::timeout(
                    timeout,
                    self.api
                        .replace(&self.config.lease_name, &PostParams::default(), &lease),
                )
                .await
            }
        };
        match written {
            Err(_) => Err(self.no_answer("write", timeout)),
            // Another candidate wrote first: it won this round.
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                Ok(Attempt::NotLeading { holder: None })
            }
            Ok(Err(e)) => Err(self.failed("write", e)),
            Ok(Ok(lease)) => {
                let record = lease.spec.as_ref().map(Record::from_spec);
                self.candidate.observe(record.as_ref(), Instant::now());
                self.current = Some(lease);
                Ok(Attempt::Leading)
            }
        }
    }

    /// Gives the Lease up if this process still holds it (as last read).
    async fn release(&mut self) -> Result<(), LeaderError> {
        let Some(record) = self.candidate.released(Timestamp::now()) else {
            return Ok(());
        };
        let mut lease = self.current.clone().unwrap_or_default();
        lease.spec = Some(record.to_spec());
        let timeout = self.config.renew_deadline;
        match tokio::time::timeout(
            timeout,
            self.api
                .replace(&self.config.lease_name, &PostParams::default(), &lease),
        )
        .await
        {
            Err(_) => Err(self.no_answer("release", timeout)),
            Ok(Err(e)) => Err(self.failed("release", e)),
            Ok(Ok(lease)) => {
                tracing::info!(
                    "leader election: {} released Lease {}/{}",
                    self.config.identity,
                    self.config.namespace,
                    self.config.lease_name
                );
                self.current = Some(lease);
                Ok(())
            }
        }
    }

    fn no_answer(&self, request: &'static str, within: Duration) -> LeaderError {
        LeaderError::NoAnswer {
            namespace: self.config.namespace.clone(),
            name: self.config.lease_name.clone(),
            request,
            within,
        }
    }

    fn failed(&self, request: &'static str, source: kube::Error) -> LeaderError {
        LeaderError::Lease {
            namespace: self.config.namespace.clone(),
            name: self.config.lease_name.clone(),
            request,
            source: Box::new(source),
        }
    }
}

/// Holding the Lease: a task renews it until [`Leadership::release`] or until it is lost.
pub struct Leadership {
    lost: watch::Receiver<Option<String>>,
    stop_renewing: watch::Sender<bool>,
    task: JoinHandle<Elector>,
}

impl Leadership {
    fn start(elector: Elector) -> Leadership {
        let (lost_tx, lost) = watch::channel(None);
        let (stop_renewing, stop_rx) = watch::channel(false);
        let task = tokio::spawn(renew(elector, lost_tx, stop_rx));
        Leadership {
            lost,
            stop_renewing,
            task,
        }
    }

    /// Resolves when leadership is lost, with why. The caller must stop acting at once.
    pub async fn lost(&mut self) -> String {
        match self.lost.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            // The renewing task is gone (it panicked): nothing renews any more.
            Err(_) => "the Lease renewal stopped".to_string(),
        }
    }

    /// Why leadership was lost, if it was.
    pub fn lost_now(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    /// Stops renewing and gives the Lease up (when still held), so a standby takes over
    /// at once. Call after the work stopped.
    pub async fn release(self) -> Result<(), LeaderError> {
        let _ = self.stop_renewing.send(true);
        let mut elector = self.task.await.map_err(LeaderError::RenewalTask)?;
        if self.lost.borrow().is_some() {
            return Ok(());
        }
        elector.release().await
    }
}

/// Renews every retry period until told to stop; reports a loss and returns on one. The
/// renew deadline counts from the last successful renewal, and is checked on time even when
/// requests keep failing.
async fn renew(
    mut elector: Elector,
    lost: watch::Sender<Option<String>>,
    mut stop: watch::Receiver<bool>,
) -> Elector {
    let period = elector.config.retry_period;
    let deadline_after = elector.config.renew_deadline;
    let mut renewed_at = Instant::now();
    loop {
        let deadline = renewed_at + deadline_after;
        tokio::select! {
            _ = tokio::time::sleep_until((Instant::now() + period).min(deadline)) => {}
            _ = stop.wait_for(|s| *s) => return elector,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let reason = if left.is_zero() {
            format!("could not renew the Lease within the renew deadline ({deadline_after:?})")
        } else {
            match elector.attempt(left).await {
                Ok(Attempt::Leading) => {
                    renewed_at = Instant::now();
                    continue;
                }
                Ok(Attempt::NotLeading {
                    holder: Some(holder),
                }) => format!("{holder} holds the Lease now"),
                Ok(Attempt::NotLeading { holder: None }) => {
                    "another candidate wrote the Lease (409 Conflict on renew)".to_string()
                }
                Err(e) if Instant::now() < deadline => {
                    tracing::warn!("{e}; retrying until the renew deadline");
                    continue;
                }
                Err(e) => format!(
                    "could not renew the Lease within the renew deadline ({deadline_after:?}): {e}"
                ),
            }
        };
        tracing::error!(
            "leader election: {} lost the leadership: {reason}",
            elector.config.identity
        );
        let _ = lost.send(Some(reason));
        return elector;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(15);

    fn ts(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn held_by(holder: &str, transitions: i32) -> Record {
        Record {
            holder: Some(holder.to_string()),
            lease_duration: LEASE,
            acquire_time: Some(ts(0)),
            renew_time: Some(ts(0)),
            transitions,
        }
    }

    #[test]
    fn no_lease_is_created_held_with_no_transitions() {
        let me = Candidate::new("a", LEASE);
        match me.decide(Instant::now(), ts(5)) {
            Decision::Create(r) => {
                assert_eq!(r.holder.as_deref(), Some("a"));
                assert_eq!(
                    (r.transitions, r.acquire_time, r.renew_time),
                    (0, Some(ts(5)), Some(ts(5)))
                );
                assert_eq!(r.to_spec().lease_duration_seconds, Some(15));
            }
            other => panic!("expected Create, got {other:?}"),
        }
    }

    #[test]
    fn another_holder_is_waited_for_until_its_record_stood_still_for_the_lease_duration() {
        let start = Instant::now();
        let mut me = Candidate::new("b", LEASE);
        me.observe(Some(&held_by("a", 3)), start);
        let wait = Decision::Wait {
            holder: "a".to_string(),
        };
        assert_eq!(me.decide(start + Duration::from_secs(14), ts(14)), wait);
        assert!(!me.is_leader());

        // The holder renews at 10 s: the observed time moves, the lease is good until 25 s.
        let mut renewed = held_by("a", 3);
        renewed.renew_time = Some(ts(10));
        me.observe(Some(&renewed), start + Duration::from_secs(10));
        assert_eq!(me.decide(start + Duration::from_secs(24), ts(24)), wait);

        // Reading the same record again does not move it: at 25 s it has expired.
        me.observe(Some(&renewed), start + Duration::from_secs(20));
        match me.decide(start + Duration::from_secs(25), ts(25)) {
            Decision::Update(r) => {
                assert_eq!(r.holder.as_deref(), Some("b"));
                assert_eq!(r.transitions, 4, "a takeover is a transition");
                assert_eq!((r.acquire_time, r.renew_time), (Some(ts(25)), Some(ts(25))));
            }
            other => panic!("expected a takeover, got {other:?}"),
        }
    }

    #[test]
    fn the_wall_clock_in_the_record_does_not_decide_expiry() {
        // A holder whose node clock is an hour behind still holds a lease it renews.
        let start = Instant::now();
        let mut me = Candidate::new("b", LEASE);
        let mut skewed = held_by("a", 0);
        skewed.renew_time = Some(ts(-3600));
        me.observe(Some(&skewed), start);
        assert!(matches!(
            me.decide(start + Duration::from_secs(1), ts(1)),
            Decision::Wait { .. }
        ));
    }

    #[test]
    fn the_holder_renews_keeping_its_acquire_time_and_transitions() {
        let start = Instant::now();
        let mut me = Candidate::new("a", LEASE);
        me.observe(Some(&held_by("a", 2)), start);
        assert!(me.is_leader());
        // Even long after its last renewal (the API server was away), the holder renews.
        match me.decide(start + Duration::from_secs(60), ts(60)) {
            Decision::Update(r) => {
                assert_eq!(r.transitions, 2);
                assert_eq!(r.acquire_time, Some(ts(0)));
                assert_eq!(r.renew_time, Some(ts(60)));
            }
            other => panic!("expected a renewal, got {other:?}"),
        }
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let start = Instant::now();
        let leader = {
            let mut c = Candidate::new("a", LEASE);
            c.observe(Some(&held_by("a", 1)), start);
            c
        };
        let released = leader.released(ts(3)).expect("the holder can release");
        assert_eq!(released.holder, None);
        assert_eq!(released.lease_duration, Duration::from_secs(1));
        assert_eq!(released.transitions, 1);
        assert_eq!(released.to_spec().holder_identity, None);

        let mut standby = Candidate::new("b", LEASE);
        standby.observe(Some(&released), start + Duration::from_secs(3));
        match standby.decide(start + Duration::from_secs(3), ts(3)) {
            Decision::Update(r) => {
                assert_eq!(r.holder.as_deref(), Some("b"));
                assert_eq!(r.transitions, 2);
                assert_eq!(r.lease_duration, LEASE);
            }
            other => panic!("expected a takeover, got {other:?}"),
        }
        // Only the holder can release.
        assert_eq!(standby.released(ts(4)), None);
    }

    #[test]
    fn an_empty_holder_identity_counts_as_released() {
        let spec = LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        };
        assert_eq!(Record::from_spec(&spec).holder, None);
    }

    #[test]
    fn a_deleted_lease_is_created_again() {
        let mut me = Candidate::new("a", LEASE);
        me.observe(Some(&held_by("x", 0)), Instant::now());
        me.observe(None, Instant::now());
        assert!(matches!(
            me.decide(Instant::now(), ts(0)),
            Decision::Create(_)
        ));
    }

    fn config() -> ElectionConfig {
        ElectionConfig {
            lease_name: "tagpin-leader".into(),
            namespace: "tagpin".into(),
            identity: "a_1".into(),
            // client-go's defaults, as the command line's.
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn configurations_that_could_elect_two_leaders_are_refused() {
        assert!(config().validate().is_ok());
        let refused = |c: ElectionConfig| c.validate().unwrap_err().to_string();
        let msg = refused(ElectionConfig {
            renew_deadline: Duration::from_secs(15),
            ..config()
        });
        assert!(
            msg.contains("must be shorter than the lease duration"),
            "{msg}"
        );
        let msg = refused(ElectionConfig {
            retry_period: Duration::from_secs(9),
            ..config()
        });
        assert!(msg.contains("1.2 × the retry period"), "{msg}");
        let msg = refused(ElectionConfig {
            lease_duration: Duration::from_millis(2500),
            ..config()
        });
        assert!(msg.contains("whole number of seconds"), "{msg}");
        let msg = refused(ElectionConfig {
            namespace: String::new(),
            ..config()
        });
        assert!(msg.contains("namespace is empty"), "{msg}");
    }

    #[test]
    fn durations_take_milliseconds_too() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1.5ms")
            .unwrap_err()
            .to_string()
            .contains("1.5ms"));
    }

    #[test]
    fn identities_are_unique_per_process_start() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        assert!(a.contains('_'), "{a}");
    }
}
