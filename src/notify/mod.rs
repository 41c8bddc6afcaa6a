//! Notifications: the events of a delivery ([`crate::event`], from
//! [`crate::cycle::events`]) told to Slack, Microsoft Teams or any webhook, as
//! `notifications:` in the configuration asks. Adapter (reqwest).
//!
//! - Each kind's body is written apart, pure: [`slack`], [`msteams`] (an Adaptive Card),
//!   [`cloudevents`] (a CloudEvents 1.0 structured event, HMAC-signed when a key is given);
//!   [`message`] is what they all say.
//! - [`send`] posts one message within its bounds (time, size, no redirects, retries on 5xx,
//!   429 and no answer, `Retry-After` honoured and capped) and never reads the answer's body.
//! - [`ledger`] keeps which were delivered, in the repository's cache directory, so that an
//!   event is told once per receiver: not at every pass, not again after a restart.
//! - [`Notifications::tell`] returns at once: the messages go out in a task of their own,
//!   so a slow or failing receiver never holds up or fails a cycle. A failure is logged with
//!   the receiver's host only (a webhook URL's path is its credential) and counted in
//!   `tagpin_notifications_total{kind, result}`.

pub mod cloudevents;
pub mod ledger;
pub mod message;
pub mod msteams;
pub mod send;
pub mod slack;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use reqwest::header::HeaderValue;

use crate::config::{Notification, NotifyKind, SecretName};
use crate::event::{Event, EventKind};
use crate::mutex::lock;
use crate::server::Shared;
use ledger::Ledger;
use send::Limits;

/// Cache directories whose ledgers are kept open at most; past it, all are dropped (and read
/// again from their files when next needed).
const MAX_LEDGERS: usize = 4_096;

/// One receiver, its URL and signing key read.
#[derive(Clone)]
pub struct Target {
    pub kind: NotifyKind,
    url: reqwest::Url,
    secret: Option<String>,
    events: Vec<EventKind>,
    stages: Vec<String>,
    /// Names the receiver in the ledger and logs without its URL: the kind and where its
    /// URL is read (`slack:SLACK_WEBHOOK_URL`).
    name: String,
}

/// Never the URL nor the key: both are credentials.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("host", &self.host())
            .finish_non_exhaustive()
    }
}

/// A receiver that cannot be used. Names where its URL is read, never the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("{0}: not set or empty")]
    Missing(String),
    #[error("{0}: not an http(s) URL with a host")]
    NotAUrl(String),
}

impl Target {
    /// The receiver `entry` configures, with the URL and key read from where it names.
    pub fn new(
        entry: &Notification,
        url: &str,
        secret: Option<String>,
    ) -> Result<Target, TargetError> {
        let name = format!("{}:{}", entry.kind.name(), source_name(&entry.url));
        let parsed = reqwest::Url::parse(url.trim())
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .ok_or_else(|| TargetError::NotAUrl(source_name(&entry.url).to_string()))?;
        Ok(Target {
            kind: entry.kind,
            url: parsed,
            secret: secret.filter(|s| !s.is_empty()),
            events: entry.events.clone(),
            stages: entry.stages.clone(),
            name,
        })
    }

    /// The host messages go to: what logs name.
    pub fn host(&self) -> &str {
        self.url.host_str().unwrap_or("")
    }

    /// Whether this receiver is told `event`.
    pub fn wants(&self, event: &Event) -> bool {
        self.events.contains(&event.kind)
            && (self.stages.is_empty() || self.stages.contains(&event.stage))
    }

    /// The body and headers of `event`'s message to this receiver.
    fn message(&self, event: &Event) -> (Vec<u8>, reqwest::header::HeaderMap) {
        let (body, content_type) = match self.kind {
            NotifyKind::Slack => (slack::body(event), "application/json"),
            NotifyKind::Msteams => (msteams::body(event), "application/json"),
            NotifyKind::Webhook => (cloudevents::body(event), cloudevents::CONTENT_TYPE),
        };
        let bytes = body.to_string().into_bytes();
        let mut headers = send::json_headers(content_type);
        if let Some(key) = &self.secret {
            if let Ok(value) = HeaderValue::from_str(&cloudevents::signature(key, &bytes)) {
                headers.insert(cloudevents::SIGNATURE_HEADER, value);
            }
        }
        (bytes, headers)
    }
}

/// Where an entry's URL is read, as the configuration names it.
fn source_name(name: &SecretName) -> &str {
    match name {
        SecretName::Env(name) | SecretName::SecretKey(name) => name,
    }
}

/// The receivers of `entries` whose URLs (and keys) are in the environment (`tagpin run`):
/// one that is not is logged, by the variable's name, and left out.
pub fn targets_from_env(entries: &[Notification]) -> Vec<Target> {
    let read = |name: &SecretName| match name {
        SecretName::Env(var) => {
            crate::config::read_env(var).map_err(|_| TargetError::Missing(var.clone()))
        }
        SecretName::SecretKey(key) => Err(TargetError::Missing(key.clone())),
    };
    let mut targets = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let built = read(&entry.url).and_then(|url| {
            let secret = entry.secret.as_ref().map(&read).transpose()?;
            Target::new(entry, &url, secret)
        });
        match built {
            Ok(target) => targets.push(target),
            Err(e) => tracing::error!("notifications[{i}] left out: {e}"),
        }
    }
    targets
}

/// Where messages may go over plain HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Anywhere the configuration says (`tagpin run`: its URLs are its operator's own).
    Any,
    /// HTTPS only, but for these hosts (the operator: URLs are its tenants',
    /// `--notify-allow-http HOST`).
    HttpsOnly { allow_http: Vec<String> },
}

impl Transport {
    fn allows(&self, url: &reqwest::Url) -> bool {
        match self {
            Transport::Any => true,
            Transport::HttpsOnly { allow_http } => {
                url.scheme() == "https"
                    || url
                        .host_str()
                        .is_some_and(|host| allow_http.iter().any(|h| h.eq_ignore_ascii_case(host)))
            }
        }
    }
}

/// What every notification of a process shares: the client, the bounds, where plain HTTP
/// may go, the metrics, and the ledger of each cache directory.
pub struct Notifications {
    client: reqwest::Client,
    limits: Limits,
    transport: Transport,
    shared: Arc<Shared>,
    ledgers: Mutex<HashMap<PathBuf, Arc<Ledger>>>,
}

/// One message to deliver: to whom, what, and its ledger key.
struct Job {
    target: Target,
    event: Event,
    key: String,
}

impl Notifications {
    pub fn new(shared: Arc<Shared>, transport: Transport) -> Arc<Notifications> {
        let limits = Limits::default();
        for kind in [NotifyKind::Slack, NotifyKind::Msteams, NotifyKind::Webhook] {
            shared.metrics.zero_notifications(kind.name());
        }
        Arc::new(Notifications {
            client: send::client(&limits),
            limits,
            transport,
            shared,
            ledgers: Mutex::default(),
        })
    }

    /// Tells each of `events` to each of `targets` that wants it and was not told it yet (by
    /// the ledger of `cache_dir`), in a task of its own: returns at once, with the task when
    /// there is something to send (a one-shot command awaits it; a controller need not).
    pub fn tell(
        self: &Arc<Self>,
        cache_dir: &Path,
        targets: &[Target],
        events: Vec<Event>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        if targets.is_empty() || events.is_empty() {
            return None;
        }
        let ledger = self.ledger(cache_dir);
        let mut jobs = Jobs::default();
        for event in events {
            for target in targets.iter().filter(|t| t.wants(&event)) {
                let key = format!("{}/{}", target.name, event.id());
                jobs.add(key, target, &event);
            }
        }
        let now = crate::clock::unix_now();
        let fresh = ledger.claim(jobs.keys(), now);
        let jobs = jobs.take(&fresh);
        if jobs.is_empty() {
            return None;
        }
        let this = self.clone();
        Some(tokio::spawn(async move {
            for job in jobs {
                this.deliver(&ledger, job).await;
            }
        }))
    }

    async fn deliver(&self, ledger: &Ledger, job: Job) {
        let Job { target, event, key } = job;
        let kind = target.kind.name();
        if !self.transport.allows(&target.url) {
            tracing::warn!(
                "notification {} to {} not sent: plain http:// is refused (HTTPS only, unless \
                 --notify-allow-http names the host)",
                target.name,
                target.host()
            );
            ledger.failed(&key);
            self.shared.metrics.notified(kind, "refused");
            return;
        }
        let (body, headers) = target.message(&event);
        let delivered = send::deliver(&self.client, &target.url, body, headers, &self.limits).await;
        match delivered {
            Ok(attempts) => {
                ledger.delivered(&key, crate::clock::unix_now());
                self.shared.metrics.notified(kind, "sent");
                tracing::info!(
                    "notified {} of {} ({}) in {attempts} attempt(s)",
                    target.host(),
                    event.kind,
                    event.stage
                );
            }
            Err(e) => {
                ledger.failed(&key);
                let result = match e {
                    send::Failure::TooLarge(_) => "refused",
                    _ => "failed",
                };
                self.shared.metrics.notified(kind, result);
                tracing::warn!(
                    "notification {} of {} ({}) to {} not delivered: {e}",
                    target.name,
                    event.kind,
                    event.stage,
                    target.host()
                );
            }
        }
    }

    /// Drops the ledger kept for `cache_dir` (its directory was removed with its object).
    pub fn forget(&self, cache_dir: &Path) {
        lock(&self.ledgers).remove(cache_dir);
    }

    fn ledger(&self, cache_dir: &Path) -> Arc<Ledger> {
        let mut ledgers = lock(&self.ledgers);
        if let Some(ledger) = ledgers.get(cache_dir) {
            return ledger.clone();
        }
        if ledgers.len() >= MAX_LEDGERS {
            ledgers.clear();
        }
        let ledger = Arc::new(Ledger::in_dir(cache_dir));
        ledgers.insert(cache_dir.to_path_buf(), ledger.clone());
        ledger
    }
}

/// One repository's notifications, as a driver holds them: the process's [`Notifications`],
/// the repository's cache directory (its ledger) and its receivers.
#[derive(Clone)]
pub struct Teller {
    pub notifications: Arc<Notifications>,
    pub cache_dir: PathBuf,
    pub targets: Vec<Target>,
}

impl Teller {
    /// Tells `events` ([`Notifications::tell`]): returns at once.
    pub fn tell(&self, events: Vec<Event>) {
        // The messages go on in their task; a driver does not wait for them.
        let _sending = self
            .notifications
            .tell(&self.cache_dir, &self.targets, events);
    }
}

/// The messages one call may send, by ledger key, in the order they were asked for.
#[derive(Default)]
struct Jobs {
    order: Vec<String>,
    jobs: HashMap<String, Job>,
}

impl Jobs {
    fn add(&mut self, key: String, target: &Target, event: &Event) {
        if self.jobs.contains_key(&key) {
            return;
        }
        self.order.push(key.clone());
        let job = Job {
            target: target.clone(),
            event: event.clone(),
            key: key.clone(),
        };
        self.jobs.insert(key, job);
    }

    fn keys(&self) -> Vec<String> {
        self.order.clone()
    }

    /// The jobs of `keys`, in the order they were added.
    fn take(mut self, keys: &[String]) -> Vec<Job> {
        self.order
            .iter()
            .filter(|k| keys.contains(k))
            .filter_map(|k| self.jobs.remove(k))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: NotifyKind) -> Notification {
        Notification {
            kind,
            url: SecretName::Env("HOOK_URL".into()),
            secret: None,
            events: vec![EventKind::Failed],
            stages: vec!["staging".into()],
        }
    }

    #[test]
    fn a_target_wants_its_events_in_its_stages_and_shows_no_url() {
        let target = Target::new(
            &entry(NotifyKind::Slack),
            "https://hooks.slack.com/services/T0/B0/s3cr3t",
            None,
        )
        .unwrap();
        let failed = message::sample();
        assert!(target.wants(&failed));
        let mut elsewhere = failed.clone();
        elsewhere.stage = "production".into();
        assert!(!target.wants(&elsewhere));
        let mut pinned = failed.clone();
        pinned.kind = EventKind::Pinned;
        assert!(!target.wants(&pinned));
        let shown = format!("{target:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("hooks.slack.com") && shown.contains("slack:HOOK_URL"));
        assert_eq!(
            Target::new(&entry(NotifyKind::Slack), "hooks.slack.com/x", None).unwrap_err(),
            TargetError::NotAUrl("HOOK_URL".into())
        );
    }

    #[test]
    fn the_operator_sends_over_https_only_but_to_the_hosts_it_allows() {
        let https = reqwest::Url::parse("https://hooks.example/x").unwrap();
        let http = reqwest::Url::parse("http://receiver.tools.svc:8080/x").unwrap();
        let operator = Transport::HttpsOnly {
            allow_http: vec!["receiver.tools.svc".into()],
        };
        assert!(operator.allows(&https) && operator.allows(&http));
        let strict = Transport::HttpsOnly { allow_http: vec![] };
        assert!(strict.allows(&https) && !strict.allows(&http));
        assert!(Transport::Any.allows(&http));
    }

    #[test]
    fn a_webhook_with_a_key_is_signed_over_its_exact_body() {
        let mut e = entry(NotifyKind::Webhook);
        e.secret = Some(SecretName::Env("HOOK_KEY".into()));
        let target = Target::new(&e, "https://hooks.example/x", Some("k3y".into())).unwrap();
        let (body, headers) = target.message(&message::sample());
        assert_eq!(headers["content-type"], cloudevents::CONTENT_TYPE);
        assert_eq!(
            headers[cloudevents::SIGNATURE_HEADER],
            cloudevents::signature("k3y", &body).as_str()
        );
        let slack = Target::new(&entry(NotifyKind::Slack), "https://h.example/x", None).unwrap();
        let (_, headers) = slack.message(&message::sample());
        assert!(headers.get(cloudevents::SIGNATURE_HEADER).is_none());
    }
}
