//! The dashboard's model of one repository, built from what a driver knows after each step of
//! a cycle: sync's report (the last pass, holds), the verification round (each stage's images,
//! digests and verdicts, the change requests in flight, the audit) and the promotion round (each
//! gate and why it is closed). Pure: the driver hands the reports in; nothing here reads Git, a
//! forge or a cluster. What a view keeps from one step to the next (since when a digest runs)
//! is carried by editing the view in place ([`RepoView::synced`], [`RepoView::verified`],
//! [`RepoView::promoted`]).

use serde::Serialize;

use crate::config::{Config, WriteMode};
use crate::cycle::Verification;
use crate::inflight::{Item, Verified};
use crate::promote::round::StagePromotion;
use crate::promote::Gate;
use crate::sync::SyncReport;
use crate::verify::judge::check::Check;

/// One repository as the dashboard shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RepoView {
    /// What the repository is known by: the remote's URL (`tagpin run`), or `namespace/name`
    /// of the `PinnedRepository` (operator). The key of the board and of events.
    pub key: String,
    /// The `PinnedRepository`'s namespace (operator): who may read it is decided by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub branch: String,
    /// `commit` or `pull-request`.
    pub mode: &'static str,
    /// The branch's tip as the mirror last had it.
    pub tip: Option<String>,
    /// Distinct image digests pinned over the stages, as last verified; `None` until a
    /// verification round saw them (never, without a cluster to verify on).
    pub images_pinned: Option<usize>,
    pub change_requests: Vec<ChangeRequestView>,
    pub holds: Vec<HoldView>,
    pub audit: Option<AuditView>,
    pub last_pass: Option<PassView>,
    /// The operator's `Ready` condition and its reason, after each reconcile (also of an
    /// object stalled before its cycle could run: a spec that does not validate, a missing
    /// Secret).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadyView>,
    /// Promotion stages left to right, or the branch alone.
    pub stages: Vec<StageView>,
    /// When the view was last written (Unix seconds). Not served: a page redraws only when
    /// what it shows changed.
    #[serde(skip)]
    pub updated: i64,
}

/// A change request in flight (open), with its verdict when it was verified.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChangeRequestView {
    pub number: u64,
    pub title: String,
    pub url: String,
    /// The stage it promotes into, for a promotion.
    pub stage: Option<String>,
    pub verdict: Option<String>,
    pub summary: Option<String>,
}

/// A field held where it is: by a comment, a revert, or an age.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HoldView {
    pub stage: String,
    pub image: String,
    pub file: String,
    pub line: usize,
    /// The digest it would have moved to.
    pub would_be: String,
    pub reason: String,
    /// The commit that holds it (a revert's), when it is not a comment.
    pub commit: Option<String>,
}

/// The last audit of the branch's tip.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AuditView {
    pub commit: String,
    /// No drift, no mixed digests, nothing unread.
    pub clean: bool,
    pub summary: String,
}

/// The last sync pass.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PassView {
    pub time: i64,
    /// `ok`, `partial` or `error`.
    pub outcome: &'static str,
    pub summary: String,
}

/// The operator's `Ready` condition.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReadyView {
    pub ready: bool,
    /// The condition's reason (`Stalled`, `Reconciling`, `Converged`, ...).
    pub reason: String,
}

/// One stage (or the branch, without promotion).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StageView {
    pub name: String,
    /// The verdict on what the stage runs (`converged`, `progressing`, `failed`,
    /// `unverified`), once verified.
    pub verdict: Option<String>,
    pub summary: Option<String>,
    /// The commit the verdict is about.
    pub commit: Option<String>,
    pub images: Vec<ImageView>,
    /// The gate of the promotion into this stage (none for the first).
    pub gate: Option<GateView>,
}

/// One pinned container of one workload in a stage.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ImageView {
    /// `namespace/Kind/name`.
    pub workload: String,
    pub container: String,
    /// The image without tag or digest.
    pub image: String,
    pub tag: Option<String>,
    pub digest: String,
    /// Since when the stage pins this digest (Unix seconds; as far as this process saw).
    pub since: i64,
    pub verdict: String,
    pub reason: String,
    pub pods_on_digest: usize,
    pub pods_total: usize,
}

/// The gate of a promotion into a stage.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GateView {
    /// The stage promoted from.
    pub from: String,
    /// `open`, `soaking`, `waiting`, `refused`, `unavailable` (no cluster for the source) or
    /// `error`.
    pub state: &'static str,
    pub reason: String,
    /// Converged since (Unix seconds), when it is.
    pub since: Option<i64>,
    /// The soak the stage asks for, and what is left of it.
    pub soak_seconds: u64,
    pub remaining_seconds: Option<u64>,
}

impl RepoView {
    /// An empty view of the repository `config` describes, known as `key`: its stages named,
    /// nothing verified yet.
    pub fn new(key: &str, config: &Config, now: i64) -> RepoView {
        let stages = match &config.promotion {
            Some(promotion) => promotion.stages.iter().map(|s| s.name.clone()).collect(),
            None => vec![config.repository.branch.clone()],
        };
        RepoView {
            branch: config.repository.branch.clone(),
            mode: match config.mode {
                WriteMode::Commit => "commit",
                WriteMode::PullRequest => "pull-request",
            },
            stages: stages.into_iter().map(StageView::named).collect(),
            ..RepoView::unconfigured(key, now)
        }
    }

    /// A view of an object whose spec gave no configuration (yet): its key alone.
    pub(crate) fn unconfigured(key: &str, now: i64) -> RepoView {
        RepoView {
            key: key.to_string(),
            namespace: None,
            branch: String::new(),
            mode: "commit",
            tip: None,
            images_pinned: None,
            change_requests: Vec::new(),
            holds: Vec::new(),
            audit: None,
            last_pass: None,
            ready: None,
            stages: Vec::new(),
            updated: now,
        }
    }

    /// The view with its namespace taken from an operator's key (`namespace/name`); a
    /// remote's URL (`tagpin run`) has none.
    pub(crate) fn in_namespace_of(mut self, key: &str) -> RepoView {
        self.namespace = match key.split_once('/') {
            Some((namespace, name))
                if crate::config::is_dns_label(namespace) && !name.contains('/') =>
            {
                Some(namespace.to_string())
            }
            _ => None,
        };
        self
    }

    /// After sync: the pass, its holds (on the first stage), and the branch's tip.
    pub fn synced(
        &mut self,
        sync: &Result<SyncReport, crate::sync::SyncError>,
        tip: Option<String>,
        now: i64,
    ) {
        self.last_pass = Some(match sync {
            Ok(report) => PassView {
                time: now,
                outcome: if report.has_failures() {
                    "partial"
                } else {
                    "ok"
                },
                summary: pass_summary(report),
            },
            Err(e) => PassView {
                time: now,
                outcome: "error",
                summary: e.to_string(),
            },
        });
        if let Ok(report) = sync {
            let first = self.first_stage();
            self.holds.retain(|h| h.stage != first);
            self.holds
                .extend(report.held.iter().map(|h| hold(&first, h)));
        }
        if tip.is_some() {
            self.tip = tip;
        }
        self.updated = now;
    }

    /// After a verification round: each stage's verdict and images, the change requests in
    /// flight with theirs, the audit.
    pub fn verified(&mut self, verification: &Verification<'_>, now: i64) {
        let round = &verification.round;
        let first = self.first_stage();
        let mut open = Vec::new();
        for pr in round.listed.iter().filter(|pr| pr.open) {
            let item = round
                .verified
                .iter()
                .find(|(item, _)| item.change_request == Some(pr.number) && item.landed.is_none());
            let check = item.and_then(|(_, v)| v.as_ref().ok()?.check.as_ref());
            open.push(ChangeRequestView {
                number: pr.number,
                title: pr.title.clone(),
                url: pr.url.clone(),
                stage: item.and_then(|(item, _)| Some(item.stage?.name.clone())),
                verdict: check.map(|c| c.state.as_str().to_string()),
                summary: check.map(|c| c.summary.clone()),
            });
        }
        if round.list_error.is_none() {
            self.change_requests = open;
        }
        for (item, verified) in &round.verified {
            let Ok(Verified {
                check: Some(check),
                expectations,
                ..
            }) = verified
            else {
                continue;
            };
            if item.change_request.is_some() && item.landed.is_none() {
                continue;
            }
            let name = item.stage.map_or(first.clone(), |s| s.name.clone());
            if let Some(stage) = self.stages.iter_mut().find(|s| s.name == name) {
                stage.judged(item, check, &expectations.expected, now);
            }
        }
        self.images_pinned = Some(self.count_pinned());
        if let Some(Ok(audit)) = &verification.audit {
            self.audit = Some(AuditView {
                commit: audit.commit.clone(),
                clean: audit.clean(),
                summary: if audit.clean() {
                    "no drift, no mixed digests".to_string()
                } else {
                    "drift, mixed digests or something unread (tagpin audit says which)".to_string()
                },
            });
        }
        self.updated = now;
    }

    /// After the promotion round: each stage's gate, and what promotions hold.
    pub fn promoted(&mut self, promotions: &[StagePromotion<'_>], now: i64) {
        for promotion in promotions {
            let target = &promotion.target.name;
            let soak = promotion.target.soak.as_secs();
            let gate = gate_view(&promotion.source.name, soak, &promotion.result);
            if let Some(Ok(report)) = &promotion.result {
                self.holds.retain(|h| &h.stage != target);
                self.holds
                    .extend(report.held.iter().map(|h| hold(target, h)));
            }
            if let Some(stage) = self.stages.iter_mut().find(|s| &s.name == target) {
                stage.gate = Some(gate);
            }
        }
        self.updated = now;
    }

    fn first_stage(&self) -> String {
        self.stages
            .first()
            .map_or(self.branch.clone(), |s| s.name.clone())
    }

    fn count_pinned(&self) -> usize {
        let digests: std::collections::BTreeSet<(&str, &str)> = self
            .stages
            .iter()
            .flat_map(|s| &s.images)
            .map(|i| (i.image.as_str(), i.digest.as_str()))
            .collect();
        digests.len()
    }
}

impl StageView {
    fn named(name: String) -> StageView {
        StageView {
            name,
            verdict: None,
            summary: None,
            commit: None,
            images: Vec::new(),
            gate: None,
        }
    }

    /// The stage's verdict from a check of what landed on it; a digest it already ran keeps
    /// its `since`.
    fn judged(
        &mut self,
        item: &Item<'_>,
        check: &Check,
        expected: &[crate::verify::judge::verdict::Expected],
        now: i64,
    ) {
        let previous = std::mem::take(&mut self.images);
        self.verdict = Some(check.state.as_str().to_string());
        self.summary = Some(check.summary.clone());
        self.commit = item.final_sha.clone();
        for verdict in &check.verdicts {
            let workload = verdict.workload.to_string();
            let digest = verdict.pinned_digest.to_string();
            let pinned_ref = expected
                .iter()
                .find(|e| e.workload == verdict.workload && e.container == verdict.container)
                .map(|e| e.pinned_ref.as_str())
                .unwrap_or("");
            let (image, tag) = image_and_tag(pinned_ref);
            let since = previous
                .iter()
                .find(|p| p.workload == workload && p.container == verdict.container)
                .filter(|p| p.digest == digest)
                .map_or(item.landed.unwrap_or(now), |p| p.since);
            self.images.push(ImageView {
                workload,
                container: verdict.container.clone(),
                image,
                tag,
                digest,
                since,
                verdict: verdict.state.as_str().to_string(),
                reason: verdict.reason.clone(),
                pods_on_digest: verdict.pods_on_pinned,
                pods_total: verdict.pods_total,
            });
        }
    }
}

/// The image (without tag or digest) and the tag of a reference as written to Git.
pub(crate) fn image_and_tag(reference: &str) -> (String, Option<String>) {
    let named = reference.split('@').next().unwrap_or(reference);
    let last_slash = named.rfind('/').map_or(0, |i| i + 1);
    match named[last_slash..].rfind(':') {
        Some(colon) => {
            let at = last_slash + colon;
            (named[..at].to_string(), Some(named[at + 1..].to_string()))
        }
        None => (named.to_string(), None),
    }
}

fn hold(stage: &str, held: &crate::plan::Held) -> HoldView {
    HoldView {
        stage: stage.to_string(),
        image: held.image.clone(),
        file: held.file.display().to_string(),
        line: held.line,
        would_be: held.would_be.to_string(),
        reason: held.reason.clone(),
        commit: held.commit.clone(),
    }
}

fn pass_summary(report: &SyncReport) -> String {
    let changes: usize = report.groups.iter().map(|g| g.changes.len()).sum();
    let mut parts = vec![format!(
        "{changes} change{}",
        if changes == 1 { "" } else { "s" }
    )];
    if !report.failures.is_empty() {
        parts.push(format!("{} failed", report.failures.len()));
    }
    if !report.held.is_empty() {
        parts.push(format!("{} held", report.held.len()));
    }
    parts.join(", ")
}

/// The gate of a promotion into a stage soaking `soak` seconds, from its round's result.
fn gate_view(
    from: &str,
    soak: u64,
    result: &Option<Result<crate::promote::PromoteReport, crate::promote::PromoteError>>,
) -> GateView {
    let mut view = GateView {
        from: from.to_string(),
        state: "unavailable",
        reason: format!("no cluster for stage {from}"),
        since: None,
        soak_seconds: soak,
        remaining_seconds: None,
    };
    match result {
        None => {}
        Some(Err(e)) => {
            view.state = "error";
            view.reason = e.to_string();
        }
        Some(Ok(report)) => {
            view.reason = report.reason.clone();
            view.state = match &report.gate {
                Gate::Open { since } => {
                    view.since = Some(*since);
                    "open"
                }
                Gate::Soaking {
                    since,
                    remaining_seconds,
                    ..
                } => {
                    view.since = Some(*since);
                    view.remaining_seconds = Some(*remaining_seconds);
                    "soaking"
                }
                Gate::Waiting { .. } => "waiting",
                Gate::Refused { .. } => "refused",
            };
        }
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_splits_into_image_and_tag_whatever_its_port_or_digest() {
        assert_eq!(
            image_and_tag("127.0.0.1:5000/acme/web:1.0@sha256:abc"),
            (
                "127.0.0.1:5000/acme/web".to_string(),
                Some("1.0".to_string())
            )
        );
        assert_eq!(
            image_and_tag("127.0.0.1:5000/acme/web@sha256:abc"),
            ("127.0.0.1:5000/acme/web".to_string(), None)
        );
        assert_eq!(
            image_and_tag("nginx:1.27"),
            ("nginx".to_string(), Some("1.27".to_string()))
        );
    }

    #[test]
    fn a_failed_promotion_round_shows_a_closed_gate_with_its_reason() {
        let gate = gate_view("staging", 600, &None);
        assert_eq!(gate.state, "unavailable");
        assert!(gate.reason.contains("staging"));
        assert_eq!(gate.soak_seconds, 600);
    }
}
