//! What a failed request to the Kubernetes API means, in tagpin's words.
//!
//! Two kinds of failure must never be confused. A refusal (403) of a list is data: the
//! identity may not read it, and the caller reports what was therefore not read
//! ([`Refused`]). Anything else (no answer, 5xx, an answer too large, a kubeconfig that does
//! not work) stops the read ([`ClusterError`]), and is retried only when
//! [`ClusterError::is_transient`] says so. The API server's own message is never quoted: a
//! stage kubeconfig's `server` may be any service a tenant names, and its answer must not
//! reach a status, an Event or a log.

use std::sync::Arc;
use std::time::Duration;

use super::handle::{Cluster, Server, ServiceAccount};
use crate::bounded;
use crate::workload::WorkloadKind;

/// The cluster could not be reached or asked at all (as opposed to answering 403 or 404).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The cluster's client could not be configured; the message names the target
    /// (`kubeconfig context "prod": …`).
    #[error("{0}")]
    Config(String),
    /// The API call failed; the kube error keeps its kind (status code, transport) so callers
    /// can tell [`ClusterError::is_transient`] causes from permanent ones. The message names
    /// the API server: with several clusters configured, "timed out" alone does not say which.
    #[error("Kubernetes API {}: reading {what}: {}", server.url, cause(source, server.timeout))]
    Api {
        server: Arc<Server>,
        what: String,
        #[source]
        source: kube::Error,
    },
    /// A kind [`WorkloadKind::is_verifiable`] rules out; expectations never hold one.
    #[error("{0} is not a kind tagpin reads live")]
    NotReadable(WorkloadKind),
    /// tagpin's own identity may not impersonate the ServiceAccount it reads as: the
    /// install's fault, which stops the check rather than passing for the tenant's limits.
    #[error(
        "Kubernetes API {}: reading {what}: tagpin may not impersonate the ServiceAccount \
         {account} (403 Forbidden); grant the operator `impersonate` on serviceaccounts",
        server.url
    )]
    ImpersonationRefused {
        server: Arc<Server>,
        what: String,
        account: ServiceAccount,
    },
}

impl ClusterError {
    /// How long the API server asked to wait before trying again, for a 429.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClusterError::Api {
                source: kube::Error::Api(status),
                ..
            } => status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s))),
            _ => None,
        }
    }

    /// Timeouts, connection failures, 5xx and 429: worth another try after a pause. An answer
    /// past [`super::MAX_ANSWER_BYTES`] is not.
    pub fn is_transient(&self) -> bool {
        match self {
            ClusterError::Api {
                source: kube::Error::Api(status),
                ..
            } => status.code == 429 || status.code >= 500,
            // An answer past its cap would be as large the next time.
            ClusterError::Api { source, .. }
                if matches!(
                    bounded::exceeded_in(source),
                    Some(bounded::Exceeded::TooLarge { .. })
                ) =>
            {
                false
            }
            ClusterError::Api { source, .. } => !matches!(
                source,
                kube::Error::SerdeError(_) | kube::Error::BuildRequest(_)
            ),
            ClusterError::Config(_)
            | ClusterError::NotReadable(_)
            | ClusterError::ImpersonationRefused { .. } => false,
        }
    }
}

/// A list the API server refused (403), in tagpin's words: the API server and the list, or,
/// for an impersonated ServiceAccount, the account, the resource and the namespace. Data for
/// the caller's report, not a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl Server {
    /// `Kubernetes API https://10.0.0.1:6443: list pods in namespace team-b: 403 Forbidden`:
    /// a refusal in tagpin's words. The API server's `message` is not quoted: a stage
    /// kubeconfig's `server` may be any service a tenant names, and its answer must not reach
    /// a status, an Event or a log.
    pub fn refused(&self, what: &str, code: u16) -> String {
        format!(
            "Kubernetes API {}: list {what}: {}",
            self.url,
            status_text(code)
        )
    }
}

impl Cluster {
    /// A refused list (403) is data for the caller; any other failure stops the read.
    /// `what` names the resource listed (`pods`, `Deployment`).
    ///
    /// The refusal is the API server's message, which names the identity that was refused.
    /// When a tenant's ServiceAccount is impersonated it is tagpin's own words instead ("the
    /// ServiceAccount team-a/tagpin may not list deployments in team-b"): what the tenant may
    /// not read is not tagpin's fault to report, and nothing but the refusal is said.
    pub fn refused_or<T>(
        &self,
        result: Result<T, kube::Error>,
        namespace: &str,
        what: &str,
    ) -> Result<Result<T, Refused>, ClusterError> {
        match result {
            Ok(items) => Ok(Ok(items)),
            Err(kube::Error::Api(status))
                if status.code == 403 && !impersonation_refused(&status) =>
            {
                Ok(Err(Refused(match self.acting_as() {
                    Some(account) => {
                        let resource = refused_resource(&status, what);
                        format!(
                            "the ServiceAccount {account} may not list {resource} in {namespace}"
                        )
                    }
                    None => self
                        .server
                        .refused(&format!("{what} in namespace {namespace}"), status.code),
                })))
            }
            Err(source) => Err(self.failed(format!("{what} in namespace {namespace}"), source)),
        }
    }

    /// The error of a read of `what` that failed for `source`: a refused impersonation is the
    /// install's fault and says so; anything else names the API server and the cause.
    pub fn failed(&self, what: String, source: kube::Error) -> ClusterError {
        match (&source, self.acting_as()) {
            (kube::Error::Api(status), Some(account)) if impersonation_refused(status) => {
                ClusterError::ImpersonationRefused {
                    server: Arc::clone(&self.server),
                    what,
                    account: account.clone(),
                }
            }
            _ => ClusterError::Api {
                server: Arc::clone(&self.server),
                what,
                source,
            },
        }
    }
}

/// Whether a 403 refuses the impersonation itself (tagpin's own identity may not impersonate
/// the ServiceAccount: `serviceaccounts "tagpin" is forbidden: User "…" cannot impersonate
/// resource "serviceaccounts"…`), not the read: an install's fault, which stops the check
/// with the API server's words rather than passing for the tenant's limits.
pub fn impersonation_refused(status: &kube::core::Status) -> bool {
    status.code == 403 && status.message.contains("cannot impersonate")
}

/// The resource a 403 refused, as the API server names it in the Status's details (its
/// plural: `jobs` when listing a CronJob's runs was refused), else `fallback`.
fn refused_resource(status: &kube::core::Status, fallback: &str) -> String {
    match status.details.as_ref().map(|d| d.kind.as_str()) {
        Some(kind) if !kind.is_empty() => kind.to_string(),
        _ => plural(fallback),
    }
}

/// `Deployment` → `deployments`, `pods` stays.
fn plural(resource: &str) -> String {
    let resource = resource.to_ascii_lowercase();
    match resource.ends_with('s') {
        true => resource,
        false => format!("{resource}s"),
    }
}

/// Why a request failed, in tagpin's words: "no answer within 30s" when the client gave up
/// waiting (kube's own message only says "client error"), the bound an answer passed, the
/// HTTP status of a refusal (never the API server's message: see [`Server::refused`]), the
/// line and column of an answer that is not what the API sends; else kube's message for a
/// transport failure, and its causes.
fn cause(error: &kube::Error, timeout: Duration) -> String {
    if let Some(exceeded) = bounded::exceeded_in(error) {
        return exceeded.to_string();
    }
    match error {
        kube::Error::Api(status) => return status_text(status.code),
        kube::Error::SerdeError(e) => {
            return format!("unexpected answer: {}", bounded::json_problem(e))
        }
        kube::Error::FromUtf8(_) => return "unexpected answer: not UTF-8 text".to_string(),
        _ => {}
    }
    let mut messages = vec![error.to_string()];
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return format!("no answer within {timeout:?} (timed out)");
        }
        let message = e.to_string();
        if !messages.iter().any(|m| m.contains(&message)) {
            messages.push(message);
        }
        next = e.source();
    }
    messages.join(": ")
}

/// `403 Forbidden`: the status and its standard reason.
fn status_text(code: u16) -> String {
    match http::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("{code} {reason}"),
        None => format!("HTTP {code}"),
    }
}
