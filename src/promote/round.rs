//! The promotion step of every pass of `tagpin run` and `tagpin operator`: each stage after the
//! first is promoted from the one before it, verified on that stage's cluster, and each result
//! is counted and logged.

use std::collections::BTreeMap;

use crate::cluster::Cluster;
use crate::config::{Config, Stage};
use crate::metrics::{self, Metrics, PromotionLabels};

use super::{Gate, PromoteError, PromoteOptions, PromoteReport, Promoter};

/// The promotion step of every pass: each stage after the first is promoted from the one
/// before it, verified on that stage's cluster.
pub(crate) struct Promotions<'a> {
    pub promoter: Promoter<'a>,
    /// Each stage's cluster, by name. A stage whose cluster could not be set up at start is
    /// missing: promotions from it are skipped with a warning on every pass.
    pub clusters: &'a BTreeMap<String, Cluster>,
}

/// The promotion into one stage, as one pass left it.
pub struct StagePromotion<'c> {
    pub source: &'c Stage,
    pub target: &'c Stage,
    /// `None`: the source stage has no cluster, so nothing was verified or written.
    pub result: Option<Result<PromoteReport, PromoteError>>,
}

impl<'a> Promotions<'a> {
    /// Promotes into each stage after the first, in order, and returns what each found: the
    /// operator writes it to the object's status; `tagpin run` logs it (done here, for both).
    pub(crate) async fn run_each(&self, metrics: &Metrics) -> Vec<StagePromotion<'a>> {
        let mut done = Vec::new();
        let config: &'a Config = self.promoter.config;
        let Some(promotion) = &config.promotion else {
            return done;
        };
        for target in promotion.stages.iter().skip(1) {
            let Some(source) = promotion.source_of(&target.name) else {
                continue;
            };
            let Some(cluster) = self.clusters.get(&source.name) else {
                tracing::warn!(
                    "promotion into {}: no cluster for stage {} ({}); skipped",
                    target.name,
                    source.name,
                    source.cluster
                );
                done.push(StagePromotion {
                    source,
                    target,
                    result: None,
                });
                continue;
            };
            let result = self
                .promoter
                .run(&target.name, cluster, PromoteOptions::default())
                .await;
            let gate = match &result {
                Ok(report) => match report.gate {
                    Gate::Open { .. } => "open",
                    Gate::Soaking { .. } => "soaking",
                    Gate::Waiting { .. } => "waiting",
                    Gate::Refused { .. } => "refused",
                },
                Err(_) => "error",
            };
            metrics::inc(
                &metrics.promotions,
                PromotionLabels {
                    stage: target.name.clone(),
                    gate: gate.to_string(),
                },
            );
            match &result {
                Ok(report) => {
                    for failure in &report.failures {
                        tracing::warn!("promotion into {}: {failure}", target.name);
                    }
                    tracing::info!(
                        "promotion {} -> {}: {}; {:?}",
                        source.name,
                        target.name,
                        report.reason,
                        report.outcome
                    );
                }
                Err(e) => tracing::warn!("promotion into {}: {e}", target.name),
            }
            done.push(StagePromotion {
                source,
                target,
                result: Some(result),
            });
        }
        done
    }
}
