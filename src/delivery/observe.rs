//! The delivery metrics of `tagpin run` and the operator, observed after each cycle from the
//! same reading `tagpin report` makes ([`super::read`]), each thing once per process:
//!
//! - `tagpin_lead_time_seconds{stage}`: each converged change (image of a deployment), once;
//! - `tagpin_deployments_total{stage, outcome}`: each deployment once its outcome can no
//!   longer change (reverted or held, or a later commit of its stage landed), so a counter
//!   never counts one deployment under two outcomes;
//! - `tagpin_time_to_restore_seconds{stage}`: each restore, once.
//!
//! A restart observes the window again (the process's counters start at zero too).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::config::Config;
use crate::git::Mirror;
use crate::metrics::{self, DeploymentLabels, Metrics, StageLabels};
use crate::mutex::lock;
use crate::registry::Client;

use super::figures::Outcome;
use super::report::DeliveryReport;

/// How far back the metrics read the history: the report's default window.
pub const WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

/// Reads `config`'s delivery history from `mirror` at `now` (Unix seconds) and observes
/// what is new in `metrics`; `repository` names it (a URL, or an object's `namespace/name`).
/// A history that cannot be read is logged and observed next time; one whose branch and
/// notes did not move since the last reading is not read again. The reading, when there was
/// one, is handed back (the dashboard shows it).
pub async fn after_cycle(
    mirror: &Mirror,
    config: &Config,
    registry: &Client,
    metrics: &Metrics,
    (repository, now): (&str, i64),
) -> Option<super::Delivery> {
    super::history::fetch_notes(mirror);
    let read_at = (mirror.tip(&config.repository.branch), mirror.notes_tip());
    {
        let mut last = lock(&metrics.delivery_read_at);
        if last.get(repository) == Some(&read_at) {
            // Nothing landed and no verdict was noted since: nothing new to observe.
            return None;
        }
        last.insert(repository.to_string(), read_at);
    }
    let since = now - WINDOW.as_secs() as i64;
    match super::history::read(mirror, config, Some(registry), repository, (since, now)).await {
        Ok(delivery) => {
            observe(metrics, repository, &delivery.report);
            Some(delivery)
        }
        Err(e) => {
            lock(&metrics.delivery_read_at).remove(repository);
            tracing::warn!("delivery metrics not read: {e}");
            None
        }
    }
}

/// Observes what `report` holds that this process has not observed yet.
pub fn observe(metrics: &Metrics, repository: &str, report: &DeliveryReport) {
    // Every stage's outcomes stand at 0 before their first deployment, so the first revert
    // of a stage is an increase `increase()` and `rate()` see, not a series appearing
    // at 1 (which they read as no change).
    for stage in &report.stages {
        for outcome in Outcome::ALL {
            drop(metrics.deployments.get_or_create(&DeploymentLabels {
                stage: stage.name.clone(),
                outcome: outcome.name().to_string(),
            }));
        }
    }
    let mut seen = lock(&metrics.delivery_observed);
    let mut deployments = BTreeSet::new();
    for change in &report.changes {
        let stage = StageLabels {
            stage: change.stage.clone(),
        };
        let id = format!(
            "{repository}\0{}\0{}\0{}\0{}",
            change.commit, change.stage, change.image, change.digest
        );
        if let Some(lead) = change.lead_time {
            if seen.insert(format!("lead\0{id}")) {
                metrics.lead_time.get_or_create(&stage).observe(lead as f64);
            }
        }
        let deployment = format!(
            "deployment\0{repository}\0{}\0{}",
            change.commit, change.stage
        );
        if change.settled && deployments.insert(deployment.clone()) && seen.insert(deployment) {
            metrics::inc(
                &metrics.deployments,
                DeploymentLabels {
                    stage: change.stage.clone(),
                    outcome: change.outcome.name().to_string(),
                },
            );
        }
    }
    for (stage, from, seconds) in &report.restores {
        if seen.insert(format!("restore\0{repository}\0{stage}\0{from}")) {
            let labels = StageLabels {
                stage: stage.clone(),
            };
            metrics
                .time_to_restore
                .get_or_create(&labels)
                .observe(*seconds as f64);
        }
    }
}
