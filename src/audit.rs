//! `tagpin audit`: what runs, set against what Git says, for every workload of the namespaces
//! the configuration deploys to.
//!
//! This module gathers both sides and asks the registry what it must; the judgement is pure
//! ([`crate::verify::judge::findings`], which also says which namespaces and workloads an audit
//! covers). Git's side is the target branch's tip, read exactly as `verify --branch` reads it
//! ([`verify::read_tree`]); the cluster's is one list per namespace and kind and one pod list
//! per namespace ([`read::namespaces`]), with the same read-only permissions `verify`
//! needs. Nothing is written anywhere.

use std::collections::BTreeSet;

use crate::cluster::{Cluster, ClusterError};
use crate::config::Config;
use crate::git::{off_runtime, GitError, Mirror};
use crate::pipeline::Skipped;
use crate::reference::Reference;
use crate::registry::Client;
use crate::verify::judge::findings::{self, Ask, Audit};
use crate::verify::observe::read;
use crate::verify::{self, Families, VerifyError};

/// What an audit found, with what it looked at.
#[derive(Debug, Clone)]
pub struct AuditReport {
    /// The branch whose tip was read, and the tip.
    pub branch: String,
    pub commit: String,
    /// The namespaces audited.
    pub namespaces: Vec<String>,
    pub audit: Audit,
    /// Manifests that could not be read, each naming its file: their workloads may show as
    /// not in Git.
    pub failures: Vec<String>,
    pub skipped: Vec<Skipped>,
    /// Whether a tag was resolved to group what its pods run: the audit then depends on the
    /// registry's answer of the moment, not only on the commit and the cluster.
    pub resolved_tags: bool,
}

impl AuditReport {
    /// Nothing needs attention: no drift, no mixed digests, every list and manifest read.
    pub fn clean(&self) -> bool {
        self.audit.clean() && self.failures.is_empty()
    }
}

/// Why an audit could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Live(#[from] ClusterError),
    /// `--namespace` names a namespace the configuration deploys nothing to: auditing it would
    /// report every workload there as not in Git, which says nothing.
    #[error("--namespace {namespace}: the configuration deploys no workload there ({})", known_namespaces(.known))]
    Namespace {
        namespace: String,
        known: Vec<String>,
    },
}

fn known_namespaces(known: &[String]) -> String {
    match known {
        [] => "it deploys none at all".to_string(),
        known => format!("it deploys to {}", known.join(", ")),
    }
}

/// Audits the target branch's tip, fetched first, on `cluster`; `namespace` restricts the audit
/// to one of the namespaces the configuration deploys to.
pub async fn of_branch(
    config: &Config,
    mirror: &Mirror,
    cluster: &Cluster,
    registry: &Client,
    namespace: Option<&str>,
) -> Result<AuditReport, AuditError> {
    let branch = &config.repository.branch;
    let tip = off_runtime(|| {
        mirror.fetch(branch, &config.pull_request.branch_prefix)?;
        mirror.require_tip(branch)
    })?;
    let mut families = Families::default();
    at(
        tip,
        config,
        mirror,
        (cluster, registry),
        &mut families,
        namespace,
    )
    .await
}

/// Audits `commit` (which the mirror holds; nothing is fetched) on `cluster`, asking the
/// registry what reported digests stand for only where pods of one reference report several.
pub async fn at(
    commit: git2::Oid,
    config: &Config,
    mirror: &Mirror,
    (cluster, registry): (&Cluster, &Client),
    families: &mut Families,
    namespace: Option<&str>,
) -> Result<AuditReport, AuditError> {
    let read = off_runtime(|| verify::read_tree(mirror, commit, config))?;
    let manages = |image: &str| read.selection.manages(image);
    let git = findings::git_side(
        &read.files,
        &read.renders,
        manages,
        &verify::name_mapping(config),
    );
    let mut namespaces = findings::namespaces(&git);
    if let Some(only) = namespace {
        if !namespaces.contains(only) {
            return Err(AuditError::Namespace {
                namespace: only.to_string(),
                known: namespaces.into_iter().collect(),
            });
        }
        namespaces = BTreeSet::from([only.to_string()]);
    }
    let inventory = read::namespaces(cluster, &findings::lists(&git, &namespaces)).await?;
    let mut found = Vec::new();
    let mut resolved_tags = false;
    for ask in findings::asks(&git, &inventory, &namespaces, manages) {
        match ask {
            Ask::Digest { image, digest } => {
                found.push(families.of_digest(&image, &digest, registry).await);
            }
            Ask::Tag { image } => {
                resolved_tags = true;
                let resolved = match Reference::parse(&image) {
                    Ok(reference) => registry
                        .resolve(&reference)
                        .await
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match resolved {
                    Ok(resolved) => {
                        found.push(families.of_digest(&image, &resolved.digest, registry).await)
                    }
                    // Then only the digests the pods report are compared, which may call one
                    // index's platform manifests mixed: said, not hidden.
                    Err(e) => {
                        tracing::warn!("cannot resolve {image} to group what its pods run: {e}")
                    }
                }
            }
        }
    }
    let audit = findings::judge(&git, &inventory, &namespaces, &found, manages);
    Ok(AuditReport {
        branch: config.repository.branch.clone(),
        commit: commit.to_string(),
        namespaces: namespaces.into_iter().collect(),
        audit,
        failures: read.failures,
        skipped: read.skipped,
        resolved_tags,
    })
}
