//! The delivery figures (DORA) from what a repository's history says, pure: deployments,
//! their outcomes, lead times, change failure rate and time to restore, per stage.
//!
//! - A **deployment** is a pin or promotion commit that landed on the branch and moved digests
//!   in a stage's paths ([`Landed`] with [`Kind::Deployment`]).
//! - The verdicts recorded on a commit (`refs/notes/tagpin`) belong, per stage, to the last
//!   deployment or revert of that stage at or before that commit on the branch: a verdict on a
//!   person's later commit still judges the digests the deployment pinned.
//! - **Outcome**: `reverted` (a later commit's `Tagpin-Reverts` names it), else `held` (a
//!   later commit's `Tagpin-Held` holds one of its digests), else `failed` (a Failed verdict
//!   was recorded for it, before or after it converged), else `converged`, else `pending`.
//! - **Lead time**, per image of a converged deployment: from the digest's build time to the
//!   deployment's first Converged verdict.
//! - A **change failure** is a deployment whose outcome is failed, reverted or held.
//! - **Time to restore**: from a stage's first Failed verdict to its next Converged verdict
//!   (whatever commit converged: a revert, the next pin).
//! - **Median and p90** are nearest-rank: of `n` values sorted ascending, the one at rank
//!   `ceil(p / 100 * n)` (1-based); none of no values.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a change's lead time starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CreatedFrom {
    /// The image config's `created`.
    Created,
    /// The `org.opencontainers.image.created` annotation.
    Annotation,
    /// When tagpin first resolved the tag to the digest.
    FirstSeen,
    /// The pin commit's time: nothing earlier is known.
    Commit,
}

impl CreatedFrom {
    /// Its JSON word.
    pub fn name(self) -> &'static str {
        match self {
            CreatedFrom::Created => "created",
            CreatedFrom::Annotation => "annotation",
            CreatedFrom::FirstSeen => "first_seen",
            CreatedFrom::Commit => "commit",
        }
    }
}

/// A verdict as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Converged,
    Failed,
}

/// An image a commit moved in a stage's paths, to `digest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The repository, without tag or digest.
    pub image: String,
    pub digest: String,
    /// When the digest was built (Unix seconds), and how that is known.
    pub created: (i64, CreatedFrom),
}

/// What a commit that moved digests in a stage's paths was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A pin (the first stage, or a repository without stages) or a promotion.
    Deployment,
    /// A revert: the change it names (`Tagpin-Reverts`), if any.
    Revert { reverts: Option<String> },
}

/// A commit of the branch's first-parent history that moved digests in one stage's paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub commit: String,
    /// Its place on the branch: 0 for the oldest commit read, growing towards the tip.
    pub position: usize,
    /// Commit time (Unix seconds).
    pub time: i64,
    pub stage: String,
    pub kind: Kind,
    pub images: Vec<Image>,
    /// The `Tagpin-Held` claims of its message: `(image, digest)`.
    pub held: Vec<(String, String)>,
}

/// One recorded verdict on a commit of the branch, for a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub commit: String,
    /// The commit's place on the branch ([`Landed::position`]).
    pub position: usize,
    pub stage: String,
    pub verdict: Verdict,
    /// Unix seconds.
    pub at: i64,
}

/// What a deployment came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Converged,
    Failed,
    Reverted,
    Held,
    Pending,
}

impl Outcome {
    /// Every outcome, each a `tagpin_deployments_total` series (a deployment superseded before
    /// any verdict is counted `pending`).
    pub const ALL: [Outcome; 5] = [
        Outcome::Converged,
        Outcome::Failed,
        Outcome::Reverted,
        Outcome::Held,
        Outcome::Pending,
    ];

    /// The `outcome` label and JSON word.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Converged => "converged",
            Outcome::Failed => "failed",
            Outcome::Reverted => "reverted",
            Outcome::Held => "held",
            Outcome::Pending => "pending",
        }
    }

    /// Whether it counts as a change failure.
    pub fn is_failure(self) -> bool {
        matches!(self, Outcome::Failed | Outcome::Reverted | Outcome::Held)
    }
}

/// One deployment and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment<'h> {
    pub landed: &'h Landed,
    /// Its first Converged verdict (Unix seconds).
    pub converged: Option<i64>,
    /// Its first Failed verdict.
    pub failed: Option<i64>,
    pub outcome: Outcome,
}

/// The nearest-rank `p`th percentile of `values` (any order); `None` of none.
pub fn percentile(values: &[i64], p: u32) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len() as u64;
    let rank = (u64::from(p) * n).div_ceil(100).max(1);
    Some(sorted[(rank - 1) as usize])
}

/// Each deployment of `landed` with its verdicts and outcome, oldest first.
pub fn deployments<'h>(landed: &'h [Landed], recorded: &[Recorded]) -> Vec<Deployment<'h>> {
    let mut owned: BTreeMap<&str, Vec<(Verdict, i64)>> = BTreeMap::new();
    for r in recorded {
        if let Some(owner) = owner(landed, &r.stage, r.position) {
            owned
                .entry(owner.commit.as_str())
                .or_default()
                .push((r.verdict, r.at));
        }
    }
    landed
        .iter()
        .filter(|l| l.kind == Kind::Deployment)
        .map(|l| {
            let verdicts = owned.get(l.commit.as_str()).map_or(&[][..], |v| v);
            let first = |wanted: Verdict| {
                verdicts
                    .iter()
                    .filter(|(v, _)| *v == wanted)
                    .map(|(_, at)| *at)
                    .min()
            };
            let (converged, failed) = (first(Verdict::Converged), first(Verdict::Failed));
            Deployment {
                landed: l,
                converged,
                failed,
                outcome: outcome(landed, l, converged, failed),
            }
        })
        .collect()
}

/// The deployment or revert of `stage` a verdict on the commit at `position` judges.
fn owner<'h>(landed: &'h [Landed], stage: &str, position: usize) -> Option<&'h Landed> {
    landed
        .iter()
        .filter(|l| l.stage == stage && l.position <= position)
        .max_by_key(|l| l.position)
}

fn outcome(
    landed: &[Landed],
    deployment: &Landed,
    converged: Option<i64>,
    failed: Option<i64>,
) -> Outcome {
    let later = || landed.iter().filter(|l| l.position > deployment.position);
    let reverted = later()
        .any(|l| matches!(&l.kind, Kind::Revert { reverts: Some(c) } if *c == deployment.commit));
    let held = later().any(|l| {
        l.held.iter().any(|(image, digest)| {
            deployment
                .images
                .iter()
                .any(|i| &i.image == image && &i.digest == digest)
        })
    });
    match (reverted, held, failed, converged) {
        (true, _, _, _) => Outcome::Reverted,
        (_, true, _, _) => Outcome::Held,
        (_, _, Some(_), _) => Outcome::Failed,
        (_, _, _, Some(_)) => Outcome::Converged,
        _ => Outcome::Pending,
    }
}

/// Each restore of `stage` whose failure began at or after `since`: when it began (Unix
/// seconds) and how long it took (seconds), from a Failed verdict, the first of a failure, to
/// the next Converged one.
pub fn restores(recorded: &[Recorded], stage: &str, since: i64) -> Vec<(i64, i64)> {
    let mut verdicts: Vec<(i64, Verdict)> = recorded
        .iter()
        .filter(|r| r.stage == stage)
        .map(|r| (r.at, r.verdict))
        .collect();
    // By time; within one second, in the order recorded (along the branch, then as noted).
    verdicts.sort_by_key(|(at, _)| *at);
    let mut failing_since = None;
    let mut out = Vec::new();
    for (at, verdict) in verdicts {
        match (verdict, failing_since) {
            (Verdict::Failed, None) => failing_since = Some(at),
            (Verdict::Converged, Some(from)) => {
                if from >= since {
                    out.push((from, at - from));
                }
                failing_since = None;
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(digest: &str, created: i64) -> Image {
        Image {
            image: "registry.test/acme/web".into(),
            digest: digest.into(),
            created: (created, CreatedFrom::Created),
        }
    }

    fn landed(commit: &str, position: usize, kind: Kind, digest: &str) -> Landed {
        Landed {
            commit: commit.into(),
            position,
            time: 1000 + position as i64 * 100,
            stage: "staging".into(),
            kind,
            images: vec![image(digest, 900)],
            held: Vec::new(),
        }
    }

    fn verdict(position: usize, verdict: Verdict, at: i64) -> Recorded {
        Recorded {
            commit: format!("c{position}"),
            position,
            stage: "staging".into(),
            verdict,
            at,
        }
    }

    #[test]
    fn nearest_rank_median_and_p90() {
        assert_eq!(percentile(&[], 50), None);
        assert_eq!(percentile(&[7], 50), Some(7));
        assert_eq!(percentile(&[7], 90), Some(7));
        assert_eq!(percentile(&[4, 1, 3, 2], 50), Some(2));
        assert_eq!(percentile(&[4, 1, 3, 2], 90), Some(4));
        let ten: Vec<i64> = (1..=10).rev().collect();
        assert_eq!(percentile(&ten, 50), Some(5));
        assert_eq!(percentile(&ten, 90), Some(9));
        assert_eq!(percentile(&[5, 1, 3], 50), Some(3));
    }

    #[test]
    fn outcomes_follow_verdicts_reverts_and_holds() {
        let mut revert = landed(
            "r",
            3,
            Kind::Revert {
                reverts: Some("b".into()),
            },
            "sha256:a",
        );
        revert.held = vec![("registry.test/acme/web".into(), "sha256:b".into())];
        let mut held_only = landed("h", 6, Kind::Revert { reverts: None }, "sha256:c");
        held_only.held = vec![("registry.test/acme/web".into(), "sha256:d".into())];
        let history = vec![
            landed("a", 0, Kind::Deployment, "sha256:a"),
            landed("b", 1, Kind::Deployment, "sha256:b"),
            revert,
            landed("c", 4, Kind::Deployment, "sha256:c"),
            landed("d", 5, Kind::Deployment, "sha256:d"),
            held_only,
            landed("e", 7, Kind::Deployment, "sha256:e"),
            landed("f", 8, Kind::Deployment, "sha256:f"),
        ];
        let recorded = vec![
            verdict(0, Verdict::Converged, 1010),
            // On a person's commit after b (position 2): b's.
            verdict(2, Verdict::Converged, 1150),
            verdict(2, Verdict::Failed, 1200),
            verdict(3, Verdict::Converged, 1320),
            verdict(4, Verdict::Converged, 1450),
            verdict(7, Verdict::Converged, 1750),
            verdict(7, Verdict::Failed, 1800),
        ];
        let found: Vec<(&str, Outcome, Option<i64>)> = deployments(&history, &recorded)
            .iter()
            .map(|d| (d.landed.commit.as_str(), d.outcome, d.converged))
            .collect();
        assert_eq!(
            found,
            vec![
                ("a", Outcome::Converged, Some(1010)),
                ("b", Outcome::Reverted, Some(1150)),
                ("c", Outcome::Converged, Some(1450)),
                ("d", Outcome::Held, None),
                ("e", Outcome::Failed, Some(1750)),
                ("f", Outcome::Pending, None),
            ]
        );
        assert!(Outcome::Held.is_failure() && !Outcome::Pending.is_failure());
    }

    #[test]
    fn time_to_restore_runs_from_the_first_failed_to_the_next_converged() {
        let recorded = vec![
            verdict(0, Verdict::Converged, 100),
            verdict(1, Verdict::Failed, 200),
            verdict(1, Verdict::Failed, 260),
            verdict(2, Verdict::Converged, 500),
            verdict(3, Verdict::Failed, 900),
            verdict(4, Verdict::Converged, 960),
            verdict(5, Verdict::Failed, 2000),
        ];
        assert_eq!(
            restores(&recorded, "staging", 0),
            vec![(200, 300), (900, 60)]
        );
        assert_eq!(restores(&recorded, "staging", 201), vec![(900, 60)]);
        // A failure and its restore within one second: in the order recorded.
        let quick = vec![
            verdict(0, Verdict::Converged, 100),
            verdict(0, Verdict::Failed, 101),
            verdict(1, Verdict::Converged, 101),
        ];
        assert_eq!(restores(&quick, "staging", 0), vec![(101, 0)]);
        assert!(restores(&recorded, "production", 0).is_empty());
    }
}
