//! Registry clients of the operator, shared by the objects that reach registries alike, and
//! bounded: what tenants may set never outgrows the controller.
//!
//! Objects that agree on their Docker config Secret (at one resourceVersion) and their
//! `registries:` settings share one client: its tokens, its per-host limits, and the answers
//! it was given this interval. Objects that do not, share nothing: what one object's
//! credentials were told never answers another's pass.
//!
//! Tenants choose the settings, so every distinct one would otherwise keep a client (about
//! 150 KB each) for ever: a client unused for [`IDLE_INTERVALS`] intervals is dropped, and at
//! most [`MAX_CLIENTS`] are kept, the least recently used going first. Timeouts a spec sets are
//! capped at the reconcile deadline. The controller's own Docker config (and its credential
//! helpers) serves a tenant only for the registries the platform names
//! (`--share-registry-credentials`); every other registry gets the object's own Secret or
//! nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// tokio's: idle times follow paused test time.
use tokio::time::Instant;

use crate::mutex::lock;
use crate::registry::{Client, CredentialStore, RegistryError, Settings};
use crate::sync::shared::SharedAnswers;

/// At most this many clients are kept.
pub const MAX_CLIENTS: usize = 64;
/// A client no reconcile asked for in this many intervals is dropped.
pub const IDLE_INTERVALS: u32 = 2;

/// A registry client and the answers its passes share.
pub type ClientAndAnswers = (Arc<Client>, Arc<SharedAnswers>);

pub struct RegistryClients {
    /// The controller's own settings (`--insecure-registry`, `--ca-file`); its credentials
    /// are already restricted to the registries shared with tenants.
    base: Settings,
    /// How long answers are shared; idle clients go after [`IDLE_INTERVALS`] of these.
    interval: Duration,
    /// No timeout or budget a spec sets is longer (`--reconcile-timeout`).
    ceiling: Duration,
    clients: Mutex<BTreeMap<ClientKey, Kept>>,
    /// Requests of the clients dropped since, so the totals only grow.
    retired: Mutex<BTreeMap<(String, u16), u64>>,
}

struct Kept {
    client: Arc<Client>,
    answers: Arc<SharedAnswers>,
    used: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ClientKey {
    /// `namespace/name@resourceVersion` of the Docker config Secret.
    docker_config: Option<String>,
    insecure: Vec<String>,
    concurrency: usize,
    timeout_seconds: u64,
    budget_seconds: u64,
}

impl RegistryClients {
    /// `base`'s credentials serve tenants for the registries in `shared` only.
    pub fn new(
        mut base: Settings,
        shared: &[String],
        interval: Duration,
        ceiling: Duration,
    ) -> RegistryClients {
        base.credentials = base.credentials.restricted_to(shared);
        RegistryClients {
            base,
            interval,
            ceiling,
            clients: Mutex::default(),
            retired: Mutex::default(),
        }
    }

    /// The client for `config`'s registries, with the Docker config `docker` (its key and
    /// contents) when the object names one, and the answers shared by its passes.
    pub fn client(
        &self,
        config: &crate::config::Registries,
        docker: Option<(String, CredentialStore)>,
    ) -> Result<ClientAndAnswers, RegistryError> {
        let ceiling = self.ceiling.as_secs().max(1);
        let key = ClientKey {
            docker_config: docker.as_ref().map(|(key, _)| key.clone()),
            insecure: config.insecure.clone(),
            concurrency: config.concurrency,
            timeout_seconds: config.timeout_seconds.min(ceiling),
            budget_seconds: config.budget_seconds.min(ceiling),
        };
        let now = Instant::now();
        let mut clients = lock(&self.clients);
        if let Some(kept) = clients.get_mut(&key) {
            kept.used = now;
            return Ok((kept.client.clone(), kept.answers.clone()));
        }
        self.evict(&mut clients, &key, now);
        let mut settings = self.base.clone();
        settings
            .insecure_hosts
            .extend(config.insecure.iter().cloned());
        settings.concurrency_per_host = config.concurrency;
        settings.request_timeout = Duration::from_secs(key.timeout_seconds);
        settings.resolve_budget = Duration::from_secs(key.budget_seconds);
        if let Some((_, store)) = docker {
            settings.credentials = store.or(&self.base.credentials);
        }
        let client = Arc::new(Client::new(settings)?);
        let answers = Arc::new(SharedAnswers::new(self.interval));
        clients.insert(
            key,
            Kept {
                client: client.clone(),
                answers: answers.clone(),
                used: now,
            },
        );
        Ok((client, answers))
    }

    /// Makes room for `new`: drops the clients of an older version of its Docker config
    /// Secret (rotated: they serve nobody any more), those idle for [`IDLE_INTERVALS`]
    /// intervals, and the least recently used beyond [`MAX_CLIENTS`].
    fn evict(&self, clients: &mut BTreeMap<ClientKey, Kept>, new: &ClientKey, now: Instant) {
        let secret = |key: &ClientKey| {
            key.docker_config
                .as_deref()
                .map(|k| k.split('@').next().unwrap_or_default().to_string())
        };
        let rotated = secret(new);
        let idle = self.interval.saturating_mul(IDLE_INTERVALS);
        let mut retired = lock(&self.retired);
        let mut retire = |kept: &Kept| {
            for (key, count) in kept.client.request_counts() {
                *retired.entry(key).or_insert(0) += count;
            }
        };
        clients.retain(|key, kept| {
            let stale = rotated.is_some() && secret(key) == rotated;
            let keep = !stale && now.saturating_duration_since(kept.used) < idle;
            if !keep {
                retire(kept);
            }
            keep
        });
        while clients.len() >= MAX_CLIENTS {
            let Some(oldest) = clients
                .iter()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(kept) = clients.remove(&oldest) {
                retire(&kept);
            }
        }
    }

    /// Clients kept now.
    pub fn len(&self) -> usize {
        lock(&self.clients).len()
    }

    /// Whether no client is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets, for every client, the answers about these repositories (`domain/repository`,
    /// as a registry webhook names them).
    pub fn forget(&self, repositories: &[String]) {
        for kept in lock(&self.clients).values() {
            kept.answers.forget(repositories);
        }
    }

    /// Registry requests answered so far by (host, status), over every client there was.
    pub fn request_counts(&self) -> Vec<((String, u16), u64)> {
        let mut totals = lock(&self.retired).clone();
        for kept in lock(&self.clients).values() {
            for (key, count) in kept.client.request_counts() {
                *totals.entry(key).or_insert(0) += count;
            }
        }
        totals.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registries(timeout_seconds: u64) -> crate::config::Registries {
        crate::config::Registries {
            insecure: Vec::new(),
            ca_files: Vec::new(),
            docker_config: None,
            docker_config_secret: None,
            concurrency: 8,
            timeout_seconds,
            budget_seconds: 60,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn clients_are_shared_by_settings_and_bounded_in_number_and_idle_time() {
        let interval = Duration::from_secs(60);
        let clients =
            RegistryClients::new(Settings::default(), &[], interval, Duration::from_secs(300));
        let (a, _) = clients.client(&registries(30), None).unwrap();
        let (again, _) = clients.client(&registries(30), None).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        // Every distinct setting a tenant writes: never more than MAX_CLIENTS kept.
        for seconds in 1..=200 {
            clients.client(&registries(seconds), None).unwrap();
        }
        assert_eq!(clients.len(), MAX_CLIENTS);
        // Idle for two intervals: gone at the next new client.
        tokio::time::advance(interval * IDLE_INTERVALS).await;
        clients.client(&registries(1), None).unwrap();
        assert_eq!(clients.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spec_cannot_wait_longer_than_the_reconcile_deadline() {
        let clients = RegistryClients::new(
            Settings::default(),
            &[],
            Duration::from_secs(60),
            Duration::from_secs(120),
        );
        let (long, _) = clients.client(&registries(3600), None).unwrap();
        let (ceiling, _) = clients.client(&registries(120), None).unwrap();
        assert!(Arc::ptr_eq(&long, &ceiling), "3600 s is the 120 s ceiling");
    }
}
