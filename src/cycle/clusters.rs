//! The one place a repository's clusters are set up: each promotion stage's, and the one
//! sync's pins are verified on. Each driver says how a stage's cluster is reached (`tagpin
//! run`: the stage's `cluster` as configured; the operator: a kubeconfig it wrote from a
//! Secret, else its own cluster as the object reads) and what it does with a cluster that
//! cannot be reached (run: warns and skips that stage's promotions; the operator: stalls the
//! object). The connection error stays typed, with its cause.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::cluster::{Cluster, ClusterError};
use crate::config::{ClusterTarget, Config, Stage};

/// How one stage's cluster is reached.
pub enum Reach<'a> {
    /// Connected to now (a file configuration's stage, a kubeconfig written from a Secret).
    Connect(ClusterTarget),
    /// Already connected (the operator's own cluster, as the object reads it).
    Given(&'a Cluster),
    /// None: the stage's promotions are skipped, and say why.
    Absent,
}

/// Where sync's pins are verified when the first stage's cluster is not that place (no
/// promotion, or `verify.context` names a context of its own).
pub enum Own<'a> {
    /// Connected to now: `context` of the default kubeconfig, else as kube does by default.
    Connect(Option<&'a str>),
    /// Already connected, or none (pins only).
    Given(Option<&'a Cluster>),
}

/// A cluster that could not be set up, with its cause.
#[derive(Debug, thiserror::Error)]
pub enum ClusterSetupError {
    #[error("stage {stage}: cannot reach its cluster ({target}): {source}")]
    Stage {
        stage: String,
        target: String,
        #[source]
        source: Box<ClusterError>,
    },
    #[error("cannot reach the cluster to verify against: {0}")]
    Verify(#[source] Box<ClusterError>),
}

/// A repository's clusters, as [`set_up`] left them.
#[derive(Default)]
pub struct Clusters {
    /// Each promotion stage's cluster, by name; a stage that could not be set up is missing.
    pub stages: BTreeMap<String, Cluster>,
    /// Where sync's pins are verified; `None`: they are not (pins only).
    pub verify_on: Option<Cluster>,
    /// What could not be set up, in the order of the stages, sync's own last.
    pub problems: Vec<ClusterSetupError>,
}

/// Sets up every stage's cluster as `reach` says, and the cluster sync's pins are verified
/// on: with promotion (and no `verify.context`), the first stage's, whose cluster is its own;
/// else `own`.
pub async fn set_up<'a>(
    config: &Config,
    reach: impl Fn(&Stage) -> Reach<'a>,
    own: Own<'a>,
    timeout: Duration,
) -> Clusters {
    let mut clusters = Clusters::default();
    for stage in config.promotion.iter().flat_map(|p| &p.stages) {
        let cluster = match reach(stage) {
            Reach::Connect(target) => match Cluster::connect_to(&target, timeout).await {
                Ok(cluster) => cluster,
                Err(error) => {
                    clusters.problems.push(ClusterSetupError::Stage {
                        stage: stage.name.clone(),
                        target: target.to_string(),
                        source: Box::new(error),
                    });
                    continue;
                }
            },
            Reach::Given(cluster) => cluster.clone(),
            Reach::Absent => continue,
        };
        clusters.stages.insert(stage.name.clone(), cluster);
    }
    let first_stage = config.promotion.as_ref().map(|p| &p.stages[0].name);
    clusters.verify_on = match (&config.verify.context, first_stage) {
        (None, Some(first)) => clusters.stages.get(first).cloned(),
        _ => match own {
            Own::Given(cluster) => cluster.cloned(),
            Own::Connect(context) => match Cluster::connect(context, timeout).await {
                Ok(cluster) => Some(cluster),
                Err(error) => {
                    let error = ClusterSetupError::Verify(Box::new(error));
                    clusters.problems.push(error);
                    None
                }
            },
        },
    };
    clusters
}

impl ClusterSetupError {
    /// The stage whose cluster this is; `None`: the cluster sync's pins are verified on.
    pub fn stage(&self) -> Option<&str> {
        match self {
            ClusterSetupError::Stage { stage, .. } => Some(stage),
            ClusterSetupError::Verify(_) => None,
        }
    }
}
